"""Cluster credentials for --kubernetes: in-cluster service account and kubeconfig files as the
real `kubectl config` writes them (pipeline/kubernetes/credentials.py, yamlish.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Dict

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline.kubernetes import yamlish
from vmss_terminate.pipeline.kubernetes.credentials import from_kubeconfig, in_cluster, load_access

from ..conftest import run_cli

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")


def kubectl_config(path: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    subprocess.run([str(KUBECTL), "config", "--kubeconfig", str(path), *args], check=True,
                   capture_output=True, env=env, timeout=30)


@needs_kubectl
def test_a_kubeconfig_written_by_kubectl_with_a_token(tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    config = tmp_path / "config"
    kubectl_config(config, "set-cluster", "c1", "--server=https://10.0.0.1:6443", f"--certificate-authority={ca}")
    kubectl_config(config, "set-credentials", "agent", "--token=abc:def#not-a-comment")
    kubectl_config(config, "set-context", "ctx", "--cluster=c1", "--user=agent")
    kubectl_config(config, "use-context", "ctx")
    access = from_kubeconfig(str(config))
    assert access.server == "https://10.0.0.1:6443"
    assert access.token() == "abc:def#not-a-comment"
    assert access.verify == str(ca) and access.cert is None


@needs_kubectl
def test_a_kubeconfig_with_yaml_1_1_line_breaks_in_names_reads_as_kubectl_reads_it(tmp_path: Path) -> None:
    """kubectl's YAML writes U+2028/U+2029 in a single-quoted scalar broken over an indented line
    (`'a\u2028    b'`), and reads it back folded: the reader must agree, not keep the indentation."""
    config = tmp_path / "config"
    kubectl_config(config, "set-cluster", "a\u2028b", "--server=https://10.0.0.1:6443")
    kubectl_config(config, "set-credentials", "u \u2029 v", "--token=t\u2028")
    assert "\u2028    b'" in config.read_text(encoding="utf-8")  # the folded form this test is about
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    view = subprocess.run([str(KUBECTL), "config", "view", "--kubeconfig", str(config), "--raw", "-o", "json"],
                          check=True, capture_output=True, env=env, timeout=30, text=True).stdout
    read = yamlish.loads(config.read_text(encoding="utf-8"))
    assert read["clusters"] == json.loads(view)["clusters"] and read["clusters"][0]["name"] == "a\u2028b"
    assert read["users"] == json.loads(view)["users"] == [{"name": "u \u2029 v", "user": {"token": "t\u2028"}}]


@needs_kubectl
def test_embedded_client_certificate_is_written_to_private_files_and_removed(tmp_path: Path) -> None:
    trustme = pytest.importorskip("trustme")
    authority = trustme.CA()
    client = authority.issue_cert("agent")
    ca, cert, key = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    authority.cert_pem.write_to_path(str(ca))
    client.cert_chain_pems[0].write_to_path(str(cert))
    client.private_key_pem.write_to_path(str(key))
    config = tmp_path / "config"
    kubectl_config(config, "set-cluster", "c1", "--server=https://127.0.0.1:6443", f"--certificate-authority={ca}",
                   "--embed-certs=true")
    kubectl_config(config, "set-credentials", "agent", f"--client-certificate={cert}", f"--client-key={key}",
                   "--embed-certs=true")
    kubectl_config(config, "set-context", "ctx", "--cluster=c1", "--user=agent")
    kubectl_config(config, "use-context", "ctx")
    assert "client-key-data" in config.read_text()
    access = from_kubeconfig(str(config))
    assert access.cert is not None and isinstance(access.verify, str)
    written = [Path(access.verify), *map(Path, access.cert)]
    assert [p.read_bytes() for p in written] == [ca.read_bytes(), cert.read_bytes(), key.read_bytes()]
    assert all(p.stat().st_mode & 0o077 == 0 for p in written)
    access.close()
    assert not any(p.exists() for p in written)


def write_json_kubeconfig(path: Path, cluster: Dict[str, Any], user: Dict[str, Any]) -> None:
    import json

    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))


def test_token_file_is_read_again_for_every_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    config = tmp_path / "config.json"
    write_json_kubeconfig(config, {"server": "http://127.0.0.1:8080"}, {"tokenFile": "token"})
    access = from_kubeconfig(str(config))
    assert access.token() == "first"
    token.write_text("rotated")
    assert access.token() == "rotated"


@pytest.mark.parametrize("cluster, user, message", [
    ({"server": "http://10.0.0.1:8080"}, {"token": "t"}, "plain http and not loopback"),
    ({"server": "https://10.0.0.1", "insecure-skip-tls-verify": True}, {"token": "t"}, "insecure-skip-tls-verify"),
    ({"server": "https://10.0.0.1"}, {"exec": {"command": "kubelogin"}}, "credential plugins"),
    ({"server": "https://10.0.0.1"}, {"username": "a", "password": "b"}, "basic authentication"),
    ({"server": "ftp://10.0.0.1"}, {"token": "t"}, "not an http"),
    ({"server": "https://10.0.0.1", "certificate-authority": "missing.crt"}, {"token": "t"}, "does not exist"),
])
def test_unusable_kubeconfigs_are_bad_input_at_start(tmp_path: Path, cluster: Dict[str, Any],
                                                     user: Dict[str, Any], message: str) -> None:
    config = tmp_path / "config.json"
    write_json_kubeconfig(config, cluster, user)
    with pytest.raises(UsageError, match=message):
        from_kubeconfig(str(config))


def test_in_cluster_reads_the_service_account_directory_and_rereads_the_token(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("one")
    (tmp_path / "ca.crt").write_text("ca")
    access = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path))
    assert access.server == "https://[fd00::1]:443" and access.verify == str(tmp_path / "ca.crt")
    (tmp_path / "token").write_text("two")
    assert access.token() == "two"
    with pytest.raises(UsageError, match="no service-account token"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, str(tmp_path / "nothing"))


@pytest.mark.parametrize("port", ["\uff14\uff14\uff13", "0", "65536", "-443", "1e3", "44 3", "0x1bb", "9" * 40])
def test_an_in_cluster_port_that_is_not_a_port_is_bad_input_at_start(tmp_path: Path, port: str) -> None:
    """ASCII digits 1..65535 only: full-width '４４３' passed str.isdigit() and the agent failed at
    NotBefore, when its first request went to that URL."""
    (tmp_path / "token").write_text("t")
    with pytest.raises(UsageError, match="KUBERNETES_SERVICE_PORT=.* do not name an API server"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": port}, str(tmp_path))


def test_agent_run_refuses_a_full_width_in_cluster_port_before_anything_runs() -> None:
    done = run_cli("run", "--kubernetes", "--imds-url", "http://127.0.0.1:9", "--state-file", ":memory:",
                   env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "\uff14\uff14\uff13"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: in-cluster Kubernetes credentials: ") and done.stderr.count("\n") == 1
    assert "KUBERNETES_SERVICE_PORT='\uff14\uff14\uff13'" in done.stderr


def test_no_credentials_at_all_is_bad_input() -> None:
    with pytest.raises(UsageError, match="--kubernetes needs cluster credentials"):
        load_access(None, environ={})


def test_yaml_beyond_the_kubeconfig_subset_is_refused_with_the_way_out() -> None:
    for text in ("a: &x 1\nb: *x\n", "a: |\n  text\n", "a: [1, 2]\n", "a: 1\n---\nb: 2\n"):
        with pytest.raises(yamlish.YamlSubsetError):
            yamlish.loads(text)
    with pytest.raises(yamlish.YamlSubsetError, match="kubectl config view --flatten -o json"):
        yamlish.loads("a: !!binary x\n")
    # YAML 1.1 (kubectl, PyYAML) starts a new line at U+2028/U+2029/U+0085/CR outside quotes
    for text in ("a: 1\u2028b: 2\n", "a: x # c\u2029b: 2\n", "a: x\x85\n", "'a\u2028b': 1\n", "a: 1\rb: 2\n"):
        with pytest.raises(yamlish.YamlSubsetError, match="line break"):
            yamlish.loads(text)


def test_the_yaml_subset_reads_what_yaml_reads() -> None:
    yaml = pytest.importorskip("yaml")
    text = ("apiVersion: v1\nclusters:\n  - name: \"a b\"   # comment\n    cluster:\n      server: 'https://x:1'\n"
            "      port: 6443\n      flag: false\nusers:\n- name: u\n  user:\n    token: a#b\n    exec: {}\n"
            "nested:\n-\n  - 1\n  - 'it''s'\nempty:\n")
    assert yamlish.loads(text) == yaml.safe_load(text)
    # YAML 1.1 line breaks inside quoted scalars fold: U+2028/U+2029 stay, U+0085 and CR become a
    # space, the blanks around a break go, an escaped break joins the lines
    text = ("a: 'x  \u2028   \u2029  y'\nb: 'x\x85  y'\nc: \"x \t\u2028\t y\"\nd: \"x\\\u2028   y\"\n"
            "e: 'x\r\u2028 y'\nf: 'it''s # not a comment'\n-'g: '\u2028'\n")
    assert yamlish.loads(text) == yaml.safe_load(text)


_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=0xFFFF, blacklist_categories=("Cc", "Cs")), max_size=30)
_SCALARS = st.one_of(_TEXT, st.integers(-10**6, 10**6), st.booleans(), st.none())
_KEYS = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12)
_DOCS = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(_KEYS, inner, max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _DOCS, min_size=1, max_size=5))
@example({"0": "\u2028"}).via("found: written as '\u2028  ', a YAML 1.1 line break then indentation")
@example({"-'x": "a #b", "k": ["it's #x"]}).via("found: a quote inside a plain key is not a quoted scalar")
def test_the_yaml_subset_reads_block_yaml_as_pyyaml_writes_it(document: Dict[str, Any]) -> None:
    """Whatever PyYAML writes in block style with one scalar a line (as kubectl does) reads back as
    the same document: plain, single- and double-quoted scalars and keys (escapes included), nested
    mappings and sequences, empty collections."""
    yaml = pytest.importorskip("yaml")
    text = yaml.safe_dump(document, default_flow_style=False, width=float("inf"), allow_unicode=True)
    assert yamlish.loads(text) == document
