"""The Deploying guide's files against what they configure: the Kubernetes manifests against
Kubernetes' object schemas (bundled in kubernetes-validate: no download) and ``specem
serve``'s own parser; the nginx example run in front of a server; the guide's tables against
the server's code, so that none can drift."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import typer
import yaml
from kubernetes_validate.utils import latest_version
from specem_openai_server.drain import CUT_S
from specem_openai_server.limits import IGNORED, UNSUPPORTED, Limits

from specem_chain.cli import app
from specem_chain.cli_options import option_name
from specem_chain.members import member_list
from specem_chain.request import RequestSettings

ROOT = Path(__file__).parents[2]
GUIDE = ROOT / "docs/guides/deploying.md"
MANIFESTS = sorted((ROOT / "docs/deploy/kubernetes").glob("*.yaml"))
NGINX_SITE = ROOT / "docs/deploy/nginx/specem.conf"
OLDEST = "1.30.0"
"""The oldest Kubernetes the manifests are for: the preStop hook's ``sleep`` action."""


def objects() -> dict[str, dict[str, Any]]:
    """Every manifest's object, by its kind."""
    found = [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]
    kinds = [doc["kind"] for doc in found]
    assert len(set(kinds)) == len(kinds), "one object of each kind"
    return dict(zip(kinds, found))


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    return objects()


def test_the_manifests_are_the_objects_the_guide_describes(manifests):
    assert set(manifests) == {
        "Secret", "Deployment", "Service", "NetworkPolicy", "PodDisruptionBudget",
    }  # fmt: skip


@pytest.mark.parametrize("version", [OLDEST, latest_version()])
@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_each_manifest_is_a_valid_kubernetes_object(path, version):
    """Strict: a field that Kubernetes does not know is an error too."""
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_guide_shows_every_manifest_and_the_nginx_example():
    text = GUIDE.read_text(encoding="utf-8")
    for path in [*MANIFESTS, NGINX_SITE]:
        assert f'--8<-- "{path.relative_to(ROOT).as_posix()}"' in text, path.name


def container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (found,) = manifests["Deployment"]["spec"]["template"]["spec"]["containers"]
    return found


def serve_options(words: list[str]) -> dict[str, Any]:
    """``specem serve``'s parameters for these words, parsed by its own command (a bad
    option or value raises click's UsageError), with its settings and limits validated
    as the command validates them."""
    command = typer.main.get_command(app)
    serve = command.get_command(command.context_class(command), "serve")
    params = serve.make_context("serve", list(words)).params
    RequestSettings(**{k: params[k] for k in RequestSettings.model_fields})
    Limits(**{k: params[k] for k in Limits.model_fields})
    member_list(params["member"])
    return params


def test_the_deployments_arguments_are_accepted_by_specem_serve(manifests):
    found = container(manifests)
    assert found["command"] == ["specem"] and found["args"][0] == "serve"
    options = serve_options(found["args"][1:])
    assert options["host"] == "0.0.0.0" and options["workers"] > 1
    # the key file is the mounted Secret's
    (mount,) = found["volumeMounts"]
    (volume,) = manifests["Deployment"]["spec"]["template"]["spec"]["volumes"]
    secret = manifests["Secret"]
    assert mount["name"] == volume["name"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    (key,) = secret["stringData"]
    assert options["api_key_file"] == Path(mount["mountPath"]) / key
    assert "subPath" not in mount  # a subPath mount is never updated
    # one port, as the probes, the Service and the NetworkPolicy name it
    (port,) = found["ports"]
    assert port["containerPort"] == options["port"]
    assert found["livenessProbe"]["httpGet"] == {"path": "/health", "port": port["name"]}
    assert found["readinessProbe"]["httpGet"] == {"path": "/ready", "port": port["name"]}
    (service,) = manifests["Service"]["spec"]["ports"]
    assert service["targetPort"] == port["name"]
    for rule in manifests["NetworkPolicy"]["spec"]["ingress"]:
        assert [p["port"] for p in rule["ports"]] == [options["port"]]


def test_the_grace_period_covers_the_prestop_sleep_the_drain_and_the_cut(manifests):
    found = container(manifests)
    options = serve_options(found["args"][1:])
    sleep = found["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace = manifests["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert sleep > 0 and grace >= sleep + options["drain_seconds"] + CUT_S


def test_every_selector_selects_the_servers_pods(manifests):
    labels = manifests["Deployment"]["spec"]["template"]["metadata"]["labels"]
    selectors = [
        manifests["Deployment"]["spec"]["selector"]["matchLabels"],
        manifests["Service"]["spec"]["selector"],
        manifests["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"],
        manifests["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"],
    ]
    for selector in selectors:
        assert selector and selector.items() <= labels.items()


def table_rows(heading: str) -> list[list[str]]:
    """The cells of the table under a heading of the guide."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[1:]]


def test_the_guides_field_list_names_every_field_the_server_ignores_or_refuses():
    rows = table_rows("### OpenAI fields the server ignores or refuses")
    listed = {re.fullmatch(r"`([\w.]+)`", field)[1]: does.split(",")[0] for field, does, _ in rows}
    assert {f for f, does in listed.items() if does == "refused"} == set(UNSUPPORTED)
    assert {f for f, does in listed.items() if does == "ignored"} == set(IGNORED)
    assert len(listed) == len(rows) == len(UNSUPPORTED) + len(IGNORED)


def test_the_guides_limits_table_names_every_limit():
    named = {o for row in table_rows("## Limits") for o in re.findall(r"`(--[\w-]+)", row[0])}
    wanted = {option_name(name) for name in Limits.model_fields}
    assert wanted | {"--api-key-file", "--answer-timeout"} <= named


def nginx_directive(name: str) -> str:
    (value,) = re.findall(rf"^\s*{name} ([^;]+);", NGINX_SITE.read_text(), re.M)
    return value


def test_the_nginx_example_fits_the_servers_limits(manifests):
    """Its body limit a little above --max-body-bytes, and its read timeout past the
    longest answer that the Deployment allows."""
    assert nginx_directive("proxy_buffering") == "off"
    body = nginx_directive("client_max_body_size")
    assert body.endswith("m") and 1 < int(body[:-1]) * 2**20 / Limits().max_body_bytes < 1.5
    options = serve_options(container(manifests)["args"][1:])
    for timeout in ("proxy_read_timeout", "proxy_send_timeout"):
        assert int(nginx_directive(timeout).removesuffix("s")) > options["answer_timeout"]
