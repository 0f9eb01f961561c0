"""The Deploying guide's nginx example (docs/deploy/nginx/specem.conf), run as written in
front of a server that needs a key: TLS, the API passed through, the body limits, and
nothing else of the server reachable."""

from __future__ import annotations

import os
import re
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai_server_harness import serve
from specem_chain import RequestSettings

from specem_openai_server.keys import ApiKeys
from specem_openai_server.limits import Limits

SITE = Path(__file__).parents[3] / "docs/deploy/nginx/specem.conf"
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
"""nginx's temporary folders, each put in the test's own folder."""
KEY = "sk-specem-deploy-test-3b9e1f"
HI = [{"role": "user", "content": "Hi"}]

pytestmark = pytest.mark.skipif(NGINX is None, reason="needs nginx (apt-get install nginx)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def behind_nginx(tiny_models, tmp_path) -> Iterator[tuple[str, ssl.SSLContext]]:
    """The example in front of a keyed server on tiny members, with its address, port and
    certificate changed for the test: the proxy's https URL, and a TLS context that trusts
    its certificate."""
    import trustme

    ca = trustme.CA()
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(tmp_path / "tls.pem")
    members = [str(tiny_models["llama"]), str(tiny_models["qwen2"])]
    with serve(members, RequestSettings(max_tokens=8), keys=ApiKeys([KEY])) as base:
        port = free_port()
        site = SITE.read_text()
        for old, new in [
            ("server 127.0.0.1:8000;", f"server {base.removeprefix('http://')};"),
            ("listen 443 ssl;", f"listen 127.0.0.1:{port} ssl;"),
        ]:
            assert old in site
            site = site.replace(old, new)
        site = re.sub(r"(ssl_certificate(_key)?) [^;]+;", rf"\1 {tmp_path}/tls.pem;", site)
        (tmp_path / "site.conf").write_text(site)
        temp = " ".join(f"{kind}_temp_path {tmp_path}/{kind};" for kind in TEMP_PATHS)
        (tmp_path / "nginx.conf").write_text(
            # as root, the workers too: they write request bodies under tmp_path
            ("user root;\n" if os.geteuid() == 0 else "")
            + f"daemon off;\npid {tmp_path}/nginx.pid;\nevents {{}}\n"
            f"http {{ access_log off; {temp} include {tmp_path}/site.conf; }}\n"
        )
        log = tmp_path / "error.log"
        nginx = subprocess.Popen([NGINX, "-e", str(log), "-c", str(tmp_path / "nginx.conf")])
        try:
            deadline = time.monotonic() + 30
            while not listens(port):
                assert nginx.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "nginx does not listen"
                time.sleep(0.1)
            trust = ssl.create_default_context()
            ca.configure_trust(trust)
            yield f"https://127.0.0.1:{port}", trust
        finally:
            nginx.terminate()
            nginx.wait(timeout=30)


def test_the_nginx_example_passes_the_api_over_tls_and_nothing_else(behind_nginx):
    url, trust = behind_nginx
    http = httpx.Client(verify=trust, timeout=60)
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, http_client=http, max_retries=0)
    assert client.chat.completions.create(model="specem", messages=HI).choices[0].message.content
    chat = f"{url}/v1/chat/completions"
    bare = http.post(chat, json={"messages": HI})
    assert bare.status_code == 401 and bare.json()["error"]["code"] == "invalid_api_key"
    keyed = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    with http.stream("POST", chat, headers=keyed, json={"messages": HI, "stream": True}) as sent:
        events = [line for line in sent.iter_lines() if line.startswith("data: ")]
    assert sent.status_code == 200 and len(events) > 2 and events[-1] == "data: [DONE]"
    # past --max-body-bytes, within nginx's client_max_body_size: the server's own 413
    text = b"x" * Limits().max_body_bytes
    over = b'{"messages": [{"role": "user", "content": "' + text + b'"}]}'
    refused = http.post(chat, content=over, headers=keyed)
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"
    # past nginx's: nginx's own page
    refused = http.post(chat, content=over * 2, headers=keyed)
    assert refused.status_code == 413 and "nginx" in refused.text
    for inside in ("/health", "/ready", "/metrics"):
        assert http.get(url + inside).status_code == 404
