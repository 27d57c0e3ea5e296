<#
.SYNOPSIS
    Installs the vmss-terminate agent in a Python virtual environment and runs it at start-up.

.DESCRIPTION
    Run by the Custom Script Extension (custom-script-extension.json) or by hand as Administrator;
    safe to run again (it upgrades the agent and re-registers the task).

    The agent runs as a scheduled task at system start-up, as SYSTEM, through a small supervisor
    script (run-agent.ps1) that restarts it whenever it exits: Task Scheduler's own restart-on-failure
    only covers a failed launch, and a scheduled task needs no extra service wrapper.

    Layout:
      <InstallDir>\venv                 the virtual environment (pip install <PipArgs>)
      <InstallDir>\run-agent.ps1        supervisor started by the task
      <DataDir>\agent-args.json         extra `vmss-terminate agent run` arguments (JSON array of strings)
      <DataDir>\state.json              the agent's state file
      <DataDir>\agent.log               agent output (rotated at 10 MB)
    <DataDir> is readable and writable by SYSTEM and Administrators only.

.PARAMETER PipArgs
    pip arguments that install the agent. Default: "vmss-terminate" from PyPI (the lean agent install:
    requests and click only, no Azure SDK; the [control] extra is for pipelines, never needed here). Without internet access,
    point at a wheel or an index you host, e.g. "--no-index --find-links https://example/wheels vmss-terminate".

.PARAMETER AgentArgs
    Extra `vmss-terminate agent run` arguments, e.g. '--hook "C:\drain\drain.cmd"'. Double-quoted parts stay
    one argument.

.PARAMETER Python
    Python 3.9+ to create the virtual environment with. Default: the "py -3" launcher, then python.exe on PATH.

.PARAMETER PythonInstallerUri
    When no Python is found: URL of a python.org Windows installer (.exe) to install silently for all users.
#>
[CmdletBinding()]
param(
    [string] $PipArgs = 'vmss-terminate',
    [string] $AgentArgs = '',
    [string] $Python = '',
    [string] $PythonInstallerUri = '',
    [string] $InstallDir = (Join-Path $env:ProgramFiles 'vmss-terminate'),
    [string] $DataDir = (Join-Path $env:ProgramData 'vmss-terminate'),
    [string] $TaskName = 'vmss-terminate'
)

Set-StrictMode -Version Latest
$ErrorActionPreference = 'Stop'

function Split-Arguments([string] $Text) {
    # Words separated by whitespace; "double quoted parts" stay one word. No shell, no expansion.
    $words = @()
    foreach ($match in [regex]::Matches($Text, '"([^"]*)"|(\S+)')) {
        if ($match.Groups[1].Success) { $words += $match.Groups[1].Value } else { $words += $match.Groups[2].Value }
    }
    return $words
}

function Invoke-Checked([string] $Exe, [string[]] $Arguments) {
    & $Exe @Arguments
    if ($LASTEXITCODE -ne 0) { throw "vmss-terminate install: '$Exe $($Arguments -join ' ')' failed with exit code $LASTEXITCODE" }
}

function Test-Python([string[]] $Command) {
    # True when $Command runs a Python 3.9+. A probe may write to stderr (the Microsoft Store "python"
    # alias, a py launcher without Python 3): Windows PowerShell turns redirected stderr into an error,
    # which $ErrorActionPreference = 'Stop' would make fatal, so the probe runs with 'Continue' (local
    # to this function) and any failure just means "not this one".
    $ErrorActionPreference = 'Continue'
    try {
        $rest = @($Command | Select-Object -Skip 1)
        & $Command[0] @rest -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' 2>$null | Out-Null
        return ($LASTEXITCODE -eq 0)
    } catch {
        return $false
    }
}

function Find-Python {
    if ($Python) { return @($Python) }
    foreach ($candidate in @(@('py', '-3'), @('python'))) {
        # -First 1: with several on PATH, Get-Command returns them all.
        $command = Get-Command $candidate[0] -CommandType Application -ErrorAction SilentlyContinue | Select-Object -First 1
        if ($command) {
            $full = @($command.Source) + @($candidate | Select-Object -Skip 1)
            if (Test-Python $full) { return $full }
        }
    }
    if ($PythonInstallerUri) {
        $installer = Join-Path $env:TEMP 'vmss-terminate-python-installer.exe'
        Invoke-WebRequest -Uri $PythonInstallerUri -OutFile $installer -UseBasicParsing
        $process = Start-Process -FilePath $installer -Wait -PassThru `
            -ArgumentList '/quiet', 'InstallAllUsers=1', 'PrependPath=1', 'Include_launcher=1', 'Include_test=0'
        if ($process.ExitCode -ne 0) { throw "vmss-terminate install: Python installer failed with exit code $($process.ExitCode)" }
        return @(Join-Path $env:windir 'py.exe') + @('-3')
    }
    throw 'vmss-terminate install: no Python 3.9+ found; install it, or pass -Python or -PythonInstallerUri'
}

function Stop-Agent {
    if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) {
        Stop-ScheduledTask -TaskName $TaskName
    }
    # Stopping the task ends the supervisor; end the agent it started too, so the venv can be upgraded.
    Get-CimInstance Win32_Process |
        Where-Object { $_.CommandLine -and $_.CommandLine -like '*vmss-terminate*agent run*' } |
        ForEach-Object { Stop-Process -Id $_.ProcessId -Force -ErrorAction SilentlyContinue }
}

$venv = Join-Path $InstallDir 'venv'
$agentExe = Join-Path $venv 'Scripts\vmss-terminate.exe'
$runner = Join-Path $InstallDir 'run-agent.ps1'

Stop-Agent
New-Item -ItemType Directory -Force -Path $InstallDir, $DataDir | Out-Null
# State and configuration: SYSTEM and Administrators only (SIDs, so it works on any display language).
Invoke-Checked 'icacls.exe' @($DataDir, '/inheritance:r', '/grant:r', '*S-1-5-18:(OI)(CI)F', '*S-1-5-32-544:(OI)(CI)F')

$pythonCommand = @(Find-Python)
$pythonExe = $pythonCommand[0]
$pythonArgs = @($pythonCommand | Select-Object -Skip 1)
Invoke-Checked $pythonExe ($pythonArgs + @('-m', 'venv', $venv))
Invoke-Checked (Join-Path $venv 'Scripts\python.exe') (@('-m', 'pip', 'install', '--no-input', '--disable-pip-version-check', '--no-compile', '--upgrade') + @(Split-Arguments $PipArgs))
Invoke-Checked $agentExe @('--version')

ConvertTo-Json -InputObject @(Split-Arguments $AgentArgs) | Set-Content -Encoding UTF8 -Path (Join-Path $DataDir 'agent-args.json')

$runnerScript = @'
# Supervisor for the vmss-terminate agent (written by install-agent.ps1): restart it whenever it exits.
$ErrorActionPreference = 'Continue'
$dataDir = Join-Path $env:ProgramData 'vmss-terminate'
$agentExe = Join-Path $PSScriptRoot 'venv\Scripts\vmss-terminate.exe'
$log = Join-Path $dataDir 'agent.log'
while ($true) {
    $extra = @()
    $argsFile = Join-Path $dataDir 'agent-args.json'
    # foreach enumerates the JSON array (Windows PowerShell 5.1 returns it as one object).
    if (Test-Path $argsFile) { foreach ($item in (Get-Content -Raw -Path $argsFile | ConvertFrom-Json)) { $extra += [string]$item } }
    if ((Test-Path $log) -and (Get-Item $log).Length -gt 10MB) { Move-Item -Force $log "$log.1" }
    # 2>&1 and "$_": the agent logs on stderr, and Windows PowerShell would write each such line to the
    # log wrapped in error-record noise ("+ CategoryInfo ..."); as plain strings they stay one line each.
    & $agentExe agent run --state-file (Join-Path $dataDir 'state.json') @extra 2>&1 |
        ForEach-Object { "$_" } | Add-Content -Encoding UTF8 -Path $log
    $code = $LASTEXITCODE
    Add-Content -Encoding UTF8 -Path $log -Value "$(Get-Date -Format o) vmss-terminate agent exited with code $code; restarting in 5 s"
    Start-Sleep -Seconds 5
}
'@
Set-Content -Encoding UTF8 -Path $runner -Value $runnerScript

$action = New-ScheduledTaskAction -Execute 'powershell.exe' `
    -Argument "-NoProfile -NonInteractive -ExecutionPolicy Bypass -File `"$runner`""
$trigger = New-ScheduledTaskTrigger -AtStartup
$principal = New-ScheduledTaskPrincipal -UserId 'SYSTEM' -LogonType ServiceAccount -RunLevel Highest
$settings = New-ScheduledTaskSettingsSet -ExecutionTimeLimit ([TimeSpan]::Zero) -RestartCount 999 `
    -RestartInterval (New-TimeSpan -Minutes 1) -StartWhenAvailable -AllowStartIfOnBatteries `
    -DontStopIfGoingOnBatteries -MultipleInstances IgnoreNew
Register-ScheduledTask -TaskName $TaskName -Action $action -Trigger $trigger -Principal $principal `
    -Settings $settings -Description 'vmss-terminate agent: drain this instance and approve only its own Terminate event' `
    -Force | Out-Null
Start-ScheduledTask -TaskName $TaskName
Write-Output "vmss-terminate: agent installed in $venv and started as scheduled task '$TaskName'"
