// Scheduled events pushed by Event Grid into a Storage queue, for `vmss-terminate central run --source queue`
// (docs/central.md). Deploy once per subscription, into a resource group of it:
//   az deployment group create -g RG --template-file eventgrid-queue.bicep \
//     -p storageAccountName=NAME handlerPrincipalId=OBJECT_ID acknowledgeRoleDefinitionId=ROLE_GUID
// The same resources: templates/arm/eventgrid-queue.json, templates/terraform/eventgrid-queue/,
// `vmss-terminate render --format eventgrid` (Azure CLI).

@description('Storage account for the queue, its poison queue, the lease blobs and dead letters: 3-24 lower-case letters and digits.')
@minLength(3)
@maxLength(24)
param storageAccountName string

@description('Region of the storage account (the system topic of a subscription is global).')
param location string = resourceGroup().location

@description('Queue Event Grid delivers scheduled events to (its poison queue is QUEUE-poison).')
@minLength(3)
@maxLength(56)
param queueName string = 'scheduled-events'

@description('Name of the Event Grid system topic of this subscription.')
param systemTopicName string = 'scheduled-events'

@description('Object id of the handler identity (managed identity or service principal); empty: no role assignments.')
param handlerPrincipalId string = ''

@description('Id (GUID) of the role that may acknowledge scheduled events, assigned at this resource group (scale sets elsewhere: assign it at their scope); default the built-in role Scheduled Events Contributor, id b67fe603-310e-4889-b9ee-8257d09d353d, whose one write action is Microsoft.Maintenance/scheduledevents/acknowledge/action (its role definition as published at azure-rbac-catalog.org/roles/b67fe603-310e-4889-b9ee-8257d09d353d; Learn calls it ScheduledEventContributor); empty: not assigned.')
param acknowledgeRoleDefinitionId string = 'b67fe603-310e-4889-b9ee-8257d09d353d'

var leaseContainerName = 'vmss-terminate-leases'
var deadLetterContainerName = 'scheduled-events-deadletter'
var scheduledEventTypes = [
  'Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted'
  'microsoft.maintenance/scheduledevents/write'
]
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var storageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'

resource storage 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: storageAccountName
  location: location
  sku: {
    name: 'Standard_LRS'
  }
  kind: 'StorageV2'
  properties: {
    minimumTlsVersion: 'TLS1_2'
    allowBlobPublicAccess: false
    supportsHttpsTrafficOnly: true
  }
}

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource queue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: queueName
}

resource poisonQueue 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = {
  parent: queueService
  name: '${queueName}-poison'
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: storage
  name: 'default'
}

resource leaseContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: leaseContainerName
}

resource deadLetterContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = {
  parent: blobService
  name: deadLetterContainerName
}

resource systemTopic 'Microsoft.EventGrid/systemTopics@2022-06-15' = {
  name: systemTopicName
  location: 'global'
  properties: {
    source: subscription().id
    topicType: 'Microsoft.ResourceNotifications.MaintenanceResources'
  }
}

resource eventSubscription 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2022-06-15' = {
  parent: systemTopic
  name: 'vmss-terminate'
  properties: {
    destination: {
      endpointType: 'StorageQueue'
      properties: {
        resourceId: storage.id
        queueName: queueName
      }
    }
    eventDeliverySchema: 'EventGridSchema'
    filter: {
      includedEventTypes: scheduledEventTypes
      advancedFilters: [
        {
          operatorType: 'StringContains'
          key: 'subject'
          values: [
            '/virtualMachineScaleSets/'
          ]
        }
      ]
    }
    retryPolicy: {
      maxDeliveryAttempts: 30
      eventTimeToLiveInMinutes: 1440
    }
    deadLetterDestination: {
      endpointType: 'StorageBlob'
      properties: {
        resourceId: storage.id
        blobContainerName: deadLetterContainerName
      }
    }
  }
  dependsOn: [
    queue
    deadLetterContainer
  ]
}

resource queueRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(handlerPrincipalId)) {
  name: guid(queue.id, handlerPrincipalId, storageQueueDataContributor)
  scope: queue
  properties: {
    principalId: handlerPrincipalId
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalType: 'ServicePrincipal'
  }
}

resource poisonQueueRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(handlerPrincipalId)) {
  name: guid(poisonQueue.id, handlerPrincipalId, storageQueueDataContributor)
  scope: poisonQueue
  properties: {
    principalId: handlerPrincipalId
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalType: 'ServicePrincipal'
  }
}

resource leaseRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(handlerPrincipalId)) {
  name: guid(leaseContainer.id, handlerPrincipalId, storageBlobDataContributor)
  scope: leaseContainer
  properties: {
    principalId: handlerPrincipalId
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
    principalType: 'ServicePrincipal'
  }
}

resource acknowledgeRole 'Microsoft.Authorization/roleAssignments@2022-04-01' = if ((!empty(handlerPrincipalId)) && (!empty(acknowledgeRoleDefinitionId))) {
  name: guid(resourceGroup().id, handlerPrincipalId, acknowledgeRoleDefinitionId)
  properties: {
    principalId: handlerPrincipalId
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acknowledgeRoleDefinitionId)
    principalType: 'ServicePrincipal'
  }
}

output queueUrl string = '${storage.properties.primaryEndpoints.queue}${queueName}'
output poisonQueueName string = poisonQueue.name
