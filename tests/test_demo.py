"""`aisia demo` as a user runs it: a subprocess that starts a real LiteLLM proxy with the plugin
in front of the simulated providers, answers the real `openai` client, adapts when a provider is
broken, and stops cleanly on Ctrl-C; and the README's main job (`--traffic N --break coder`),
which ends by itself."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from proxy_harness import parse_reply

pytestmark = pytest.mark.proxy  # starts `aisia demo` (a LiteLLM proxy): not in `pytest -m "not proxy"`

AISIA = str(Path(sys.executable).parent / "aisia")
CODING = "Write a Python function that merges two sorted lists and add unit tests"


def _wait_for_file(path: Path, proc: subprocess.Popen, limit_s: float = 120) -> dict:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"aisia demo exited with {proc.returncode} before serving:\n{out}\n{err}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("aisia demo did not write its info file")


def _port_open(url: str) -> bool:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    work = tmp_path_factory.mktemp("demo")
    info_file = work / "info.json"
    proc = subprocess.Popen([AISIA, "demo", "--port", "0", "--info-file", str(info_file), "--workdir", str(work / "w")],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    info = _wait_for_file(info_file, proc)
    yield proc, info
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def _client(info) -> openai.OpenAI:
    return openai.OpenAI(base_url=info["base_url"], api_key=info["master_key"], max_retries=0, timeout=30)


def test_demo_answers_the_openai_client_on_auto_coding(demo):
    _, info = demo
    assert set(info["upstreams"]) >= {"frontier", "coder", "swift", "budget", "flaky", "local"}
    models = {m.id for m in _client(info).models.list().data}
    assert {"auto", "auto/coding", "auto/cheap", "auto/offline", "frontier", "coder"} <= models
    raw = _client(info).chat.completions.with_raw_response.create(
        model="auto/coding", messages=[{"role": "user", "content": CODING}])
    reply = raw.parse()
    served, quality = parse_reply(reply.choices[0].message.content)
    assert served == raw.headers["x-litellm-model-id"]
    assert served == "coder"  # the coding specialist, annotated in the demo policy
    assert raw.headers["x-aisia-alias"] == "auto/coding"
    assert raw.headers["x-aisia-domain"] == "coding"
    assert quality is not None and reply.usage.total_tokens > 0


def test_breaking_a_provider_moves_its_traffic_without_client_errors(demo):
    _, info = demo
    client = _client(info)
    coder = info["upstreams"]["coder"]
    # The others' random errors could, rarely, exhaust a failover chain: only coder fails here.
    for name, up in info["upstreams"].items():
        if name != "coder":
            assert httpx.post(up["control"], json={"error_rate": 0}, timeout=5).status_code == 200
    r = httpx.post(coder["control"], json={"mode": "error", "status": 503}, timeout=5)
    assert r.status_code == 200
    calls_before = httpx.get(coder["stats"], timeout=5).json()["calls"]
    served = []
    for _ in range(20):
        raw = client.chat.completions.with_raw_response.create(
            model="auto/coding", messages=[{"role": "user", "content": CODING}])
        served.append(parse_reply(raw.parse().choices[0].message.content)[0])
    # Every request answered (failover), none by the broken provider, and the broken provider
    # stopped being tried: its breaker opened before the 20 requests were through.
    assert None not in served and "coder" not in served
    tried = httpx.get(coder["stats"], timeout=5).json()["calls"] - calls_before
    assert 1 <= tried < 20
    stats = httpx.get(info["stats_url"], headers={"Authorization": f"Bearer {info['master_key']}"}, timeout=10)
    assert stats.status_code == 200
    assert "coder" in json.dumps(stats.json())
    httpx.post(coder["control"], json={"mode": "ok"}, timeout=5)


def test_ctrl_c_stops_everything(demo):
    proc, info = demo
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "demo stopped" in err and "Traceback" not in err
    assert "master key" in out and info["master_key"] in out and "/admin/bandit/stats" in out
    assert f"{info['url']}/aisia/ui   (sign in with the master key)" in out  # the routing page
    assert "?key=" not in out
    assert f"decision log {info['decision_log']}" in out and f"replay --logged {info['decision_log']}" in out
    assert f"{info['url']}/metrics" in out
    assert f"curl -s {info['url']}/v1/chat/completions" in out  # serving: how to call it
    assert not _port_open(info["url"])
    assert not any(_port_open(u["base_url"]) for u in info["upstreams"].values())
    with pytest.raises(ProcessLookupError):
        os.kill(info["pid"], 0)


def _readme_main_job() -> list[str]:
    """The arguments of `aisia demo` in the README's first command."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    first = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1)
    return shlex.split(first.split(".venv/bin/aisia demo", 1)[1])


def test_main_job_shows_the_adaptation_and_ends_by_itself():
    argv = _readme_main_job()
    assert "--break" in argv and "--traffic" in argv and "--serve" not in argv
    n = int(argv[argv.index("--traffic") + 1])
    run = subprocess.run([AISIA, "demo", *argv, "--port", "0"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    out = run.stdout
    assert "Where the requests went" in out and "before" in out and "after" in out
    m = re.search(rf"^coder answered (\d+) of {n} requests before the break and (\d+) of {n} after it; "
                  r"clients saw (\d+) errors after it", out, re.M)
    assert m, out
    before, after, errors = map(int, m.groups())
    # Failover hides coder's failures; the other providers' own random errors (flaky fails one
    # call in five) can, rarely, exhaust a request's three attempts, so one error is tolerated.
    assert before > 0 and after == 0 and errors <= 1, m.group(0)
    assert "auto/coding" in out
    # The run ends with the proxy: nothing printed tells how to call it or replay a removed log.
    assert "curl" not in out and "replay --logged /" not in out and "removed at exit" not in out, out
    assert "--serve keeps it serving" in out
    # What the plugin learned: health (calls) and quality evidence by source apart (docs/quality.md).
    # Every attempt a provider received is a call learned; no grade is posted (no --feedback): the
    # quality evidence is the conversation signals the proxy read in the users' messages.
    received = _table(out, "What each simulated provider received")
    learned = _table(out, "What the plugin learned")
    assert learned[0][:7] == ["deployment", "calls", "signals", "feedback", "judge", "prior", "quality"], learned[0]
    # A failed attempt the request itself caused (it failed on coder, then flaky's random error:
    # two providers) is not learned against either; the demo names those attempts.
    m = re.search(r"^Failed attempts not counted against their deployment \(.*\): (.*)\.$", out, re.M)
    uncounted = {name: int(n) for name, n in re.findall(r"(\w+) (\d+)", m.group(1))} if m else {}
    for row in learned[1:]:
        name, calls, feedback = row[0], row[1], row[3]
        sent = next(r for r in received if r[0] == name)
        calls_received = sum(int(c.split("/")[0]) for c in sent[1:])
        learned_calls = int(calls) if calls != "-" else 0
        assert learned_calls + uncounted.get(name, 0) == calls_received, (row, sent, uncounted)
        assert feedback in ("-", "0"), row
    signals_by_deployment = sum(int(r[2]) for r in learned[1:] if r[2] != "-")
    m = re.search(r"^It learned without feedback: no grade was posted to /aisia/feedback; .* from (\d+) conversation "
                  r"signals the proxy read in the users' messages: (.*?)\. The users said: (\d+) complaints, "
                  r"(\d+) regenerates and (\d+) thank-yous", out, re.M)
    assert m, out
    signals, kinds, complaints, regenerates, thanks = m.groups()
    assert int(signals) > 0 and int(complaints) + int(thanks) > 0
    assert signals_by_deployment >= int(signals), (signals_by_deployment, m.group(0))  # (read after the count)
    assert re.search(r"(correction|dissatisfaction) \d+ \((en|fr) \d+", kinds) and "satisfaction" in kinds, kinds
    # The frontier's share, early and late, on hard and easy prompts, per alias.
    shares = _table(out, "The frontier's share per alias")
    assert shares[0] == ["alias", "frontier", "hard", "early", "hard", "late", "easy", "early", "easy", "late"]
    by_alias = {r[0]: r for r in shares[1:]}
    assert by_alias["auto"][1] == "frontier" and by_alias["auto/coding"][1] == "frontier", shares
    assert re.fullmatch(r"\d+/\d+", by_alias["auto/coding"][2]), shares  # coding prompts are hard ones


def _table(out: str, title: str) -> list[list[str]]:
    """The rows (header first, the dashes left out) of the table printed under the line starting `title`."""
    lines = out[out.index(title):].splitlines()[1:]
    rows = []
    for line in lines:
        if not line.strip():
            break
        if not set(line.strip()) <= {"-", " "}:
            rows.append(line.split())
    return rows


@pytest.mark.parametrize("argv, code, message", [
    (["--break", "nosuch"], 2, "no simulated provider named 'nosuch'"),
    (["--traffic", "-1"], 2, "--traffic"),
])
def test_bad_arguments_are_clear_errors(argv, code, message):
    run = subprocess.run([AISIA, "demo", *argv], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert run.returncode == code and message in run.stderr and "Traceback" not in run.stderr


def test_a_taken_port_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        run = subprocess.run([AISIA, "demo", "--port", str(port)], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, timeout=60)
    assert run.returncode == 1
    assert f"port {port}" in run.stderr and "already in use" in run.stderr and "Traceback" not in run.stderr
