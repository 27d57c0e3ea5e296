// Linux VM scale set with terminate notifications (scheduledEventsProfile) and the vmss-terminate
// agent installed by cloud-init: the Bicep twin of templates/arm/azuredeploy.json. See docs/iac.md.

@description('Scale set name; instances are named {vmssName}_{instanceId}.')
@minLength(1)
@maxLength(64)
param vmssName string

param location string = resourceGroup().location

param vmSku string = 'Standard_B2s'

@minValue(0)
@maxValue(1000)
param instanceCount int = 2

@description('Resource id of an existing subnet.')
param subnetId string

param adminUsername string = 'azureuser'

@description('SSH public key for adminUsername (password login is disabled).')
param adminSshPublicKey string

param imageReference object = {
  publisher: 'Canonical'
  offer: '0001-com-ubuntu-server-jammy'
  sku: '22_04-lts-gen2'
  version: 'latest'
}

@description('With Manual, run `vmss-terminate upgrade` after changing the timeout: existing instances keep the old one until upgraded.')
@allowed([
  'Manual'
  'Automatic'
])
param upgradePolicyMode string = 'Manual'

param enableTerminateNotification bool = true

@description('Minutes Azure waits for the instance to approve its Terminate event before deleting it (notBeforeTimeout PT5M..PT15M).')
@minValue(5)
@maxValue(15)
param terminateNotificationMinutes int = 10

@description('Install the agent with templates/cloud-init/vmss-terminate.yaml.')
param installAgent bool = true

@description('pip arguments that install the agent: a version pin, a wheel URL you host, or --index-url/--find-links for instances without internet access.')
param agentPipArgs string = 'vmss-terminate'

@description('Extra `vmss-terminate agent run` arguments, e.g. --hook /etc/vmss-terminate/hooks/drain.')
param agentArgs string = ''

var terminateNotificationTimeout = 'PT${terminateNotificationMinutes}M'
var cloudInit = replace(replace(loadTextContent('../cloud-init/vmss-terminate.yaml'), 'VMSS_TERMINATE_PIP_ARGS=vmss-terminate', 'VMSS_TERMINATE_PIP_ARGS=${agentPipArgs}'), 'VMSS_TERMINATE_AGENT_ARGS=', 'VMSS_TERMINATE_AGENT_ARGS=${agentArgs}')

resource vmss 'Microsoft.Compute/virtualMachineScaleSets@2024-11-01' = {
  name: vmssName
  location: location
  sku: {
    name: vmSku
    tier: 'Standard'
    capacity: instanceCount
  }
  properties: {
    orchestrationMode: 'Uniform'
    overprovision: false
    upgradePolicy: {
      mode: upgradePolicyMode
    }
    virtualMachineProfile: {
      scheduledEventsProfile: {
        terminateNotificationProfile: {
          enable: enableTerminateNotification
          notBeforeTimeout: terminateNotificationTimeout
        }
      }
      osProfile: {
        computerNamePrefix: take(vmssName, 9)
        adminUsername: adminUsername
        customData: installAgent ? base64(cloudInit) : null
        linuxConfiguration: {
          disablePasswordAuthentication: true
          ssh: {
            publicKeys: [
              {
                path: '/home/${adminUsername}/.ssh/authorized_keys'
                keyData: adminSshPublicKey
              }
            ]
          }
        }
      }
      storageProfile: {
        imageReference: imageReference
        osDisk: {
          createOption: 'FromImage'
          caching: 'ReadWrite'
          managedDisk: {
            storageAccountType: 'StandardSSD_LRS'
          }
        }
      }
      networkProfile: {
        networkInterfaceConfigurations: [
          {
            name: '${vmssName}-nic'
            properties: {
              primary: true
              ipConfigurations: [
                {
                  name: 'ipconfig1'
                  properties: {
                    subnet: {
                      id: subnetId
                    }
                  }
                }
              ]
            }
          }
        ]
      }
    }
  }
}

output scaleSetId string = vmss.id
output terminateNotificationTimeout string = terminateNotificationTimeout
