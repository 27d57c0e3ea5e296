"""The seed format (examples/seed.json), state listeners, and `vmss-terminate emulator arm` as a
real foreground process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import requests
from helpers import serving_arm

from vmss_terminate_sim.emulator.arm.app import ArmState, InstanceRecord, ScaleSetRecord

from .conftest import SUB

EXAMPLE_SEED = Path(__file__).resolve().parents[2] / "examples" / "seed.json"


def test_example_seed_loads(tmp_path: Path) -> None:
    state = ArmState()
    created = state.load_seed(EXAMPLE_SEED)
    assert [ss.name for ss in created] == ["myvmss", "webvmss", "flexvmss"]
    web = state.scale_set(SUB, "RG", "WebVmss")
    assert web is not None and web.scheduled_events_profile is not None
    stale = [i for i in web.instances.values() if not i.latest_model_applied]
    assert len(stale) == 2
    assert all(i.applied_profile["terminateNotificationProfile"]["notBeforeTimeout"] == "PT5M" for i in stale)
    assert state.scale_set(SUB, "rg", "myvmss").scheduled_events_profile is None  # type: ignore[union-attr]
    assert state.scale_set(SUB, "rg", "flexvmss").orchestration == "Flexible"  # type: ignore[union-attr]


def test_seed_with_a_disabled_profile_is_stored_empty() -> None:
    state = ArmState()
    (ss,) = state.load_seed({"pageSize": 5, "scaleSets": [{"name": "d", "capacity": 1, "scheduledEventsProfile": {
        "terminateNotificationProfile": {"enable": False, "notBeforeTimeout": "PT5M"}}}]})
    assert ss.scheduled_events_profile == {} and state.page_size == 5


def test_bad_seed_values_are_refused() -> None:
    with pytest.raises(ValueError):
        ArmState().load_seed({"scaleSets": [{"name": "x", "orchestration": "Sideways"}]})


@pytest.mark.parametrize("entries, message", [
    ([{"capacity": 2}], 'scaleSets[0] needs a "name"'),
    ([{"name": "ok"}, {"name": "x", "capacity": "many"}], "scaleSets[1] (x): invalid literal"),
    ([{"name": "x", "upgradePolicy": "Bogus"}], "scaleSets[0] (x): upgrade_policy must be one of"),
])
def test_bad_seed_errors_name_the_entry(entries: List[Dict[str, Any]], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        ArmState().load_seed({"scaleSets": entries})
    assert message in str(caught.value)


def test_listeners_hear_changes() -> None:
    state = ArmState()
    heard: List[Tuple[str, str, List[str]]] = []

    def listen(kind: str, ss: ScaleSetRecord, instances: List[InstanceRecord]) -> None:
        heard.append((kind, ss.name, [i.name for i in instances]))

    state.add_listener(listen)
    ss = state.add_scale_set(SUB, "rg", "l", capacity=2, upgrade_policy="Automatic")
    state.apply_model(ss, dict(ss.vm_profile, scheduledEventsProfile={}), capacity=1)
    assert heard == [("model_changed", "l", []), ("upgraded", "l", ["l_0", "l_1"]),
                     ("deleting", "l", ["l_1"]), ("removed", "l", ["l_1"])]


def test_cli_serves_in_the_foreground_and_prints_how_to_connect() -> None:
    with serving_arm("--port", "0", "--seed", str(EXAMPLE_SEED), "--lro-retry-after", "2",
                  "--fault", "status=429,retry-after=3,path=/virtualMachineScaleSets/webvmss") as lines:
        text = "".join(lines)
        assert "export IDENTITY_ENDPOINT=http://127.0.0.1:" in text and "export IDENTITY_HEADER=" in text
        assert "--arm-endpoint http://127.0.0.1:" in text
        connect: Dict[str, Any] = json.loads(lines[-1].split(":", 1)[1])
        assert connect["AZURE_SUBSCRIPTION_ID"] == SUB  # the JSON carries every exported variable
        assert all(f"export {name}={value}" in text for name, value in connect.items())
        token = requests.get(connect["IDENTITY_ENDPOINT"], timeout=5,
                             params={"api-version": "2019-08-01", "resource": "https://management.azure.com"},
                             headers={"X-IDENTITY-HEADER": connect["IDENTITY_HEADER"]}).json()["access_token"]
        def get_webvmss() -> requests.Response:
            return requests.get(f"{connect['VMSS_TERMINATE_ARM_ENDPOINT']}/subscriptions/{SUB}/resourceGroups/rg/"
                                f"providers/Microsoft.Compute/virtualMachineScaleSets/webvmss", timeout=5,
                                params={"api-version": "2024-11-01"}, headers={"Authorization": f"Bearer {token}"})

        throttled = get_webvmss()  # the --fault: once (the default), for this path only
        assert throttled.status_code == 429 and throttled.headers["Retry-After"] == "3"
        assert get_webvmss().json()["sku"]["capacity"] == 6
        upgrade = requests.post(f"{connect['VMSS_TERMINATE_ARM_ENDPOINT']}/subscriptions/{SUB}/resourceGroups/rg/"
                                f"providers/Microsoft.Compute/virtualMachineScaleSets/webvmss/manualupgrade",
                                params={"api-version": "2024-11-01"}, json={"instanceIds": ["*"]}, timeout=5,
                                headers={"Authorization": f"Bearer {token}"})
        assert upgrade.status_code == 202 and upgrade.headers["Retry-After"] == "2"  # --lro-retry-after


def test_cli_refuses_a_bad_seed(tmp_path: Path) -> None:
    from helpers import invoke_cli

    from vmss_terminate.cli import main

    bad = tmp_path / "seed.json"
    bad.write_text("{not json")
    result = invoke_cli(main, ["emulator", "arm", "--seed", str(bad)])
    assert result.exit_code == 2
    assert "invalid seed" in result.output + (result.stderr if hasattr(result, "stderr") else "")


def test_cli_serves_https_with_a_given_certificate(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    with serving_arm("--tls-cert", str(tmp_path / "server.pem")) as lines:
        connect = json.loads(lines[-1].split(":", 1)[1])
        assert connect["VMSS_TERMINATE_ARM_ENDPOINT"].startswith("https://127.0.0.1:")
        assert f"--endpoint-resource-manager {connect['VMSS_TERMINATE_ARM_ENDPOINT']}/" in "".join(lines)
        answer = requests.get(connect["VMSS_TERMINATE_ARM_ENDPOINT"] + "/subscriptions", timeout=5,
                              verify=str(tmp_path / "ca.pem"))
        assert answer.status_code == 401  # TLS handshake worked; ARM wants a token


def test_cli_refuses_a_key_without_a_certificate(tmp_path: Path) -> None:
    from helpers import invoke_cli

    from vmss_terminate.cli import main

    key = tmp_path / "key.pem"
    key.write_text("x")
    result = invoke_cli(main, ["emulator", "arm", "--tls-key", str(key)])
    assert result.exit_code == 2
