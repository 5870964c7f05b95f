"""Server lifecycle against a stub server process (no vLLM, seconds): health wait, exit before healthy,
health timeout, process-group teardown, pool sharing and least-recently-used eviction."""

import os
import sys
import time

import pytest

from pytest_rocm.hw.profiles import builtin
from pytest_rocm.results.verdicts import build_signatures, find_signature
from pytest_rocm.serving.pool import ServedModel, ServerPool
from pytest_rocm.serving.process import Server, ServerStartError, free_port

# A stand-in for an OpenAI-compatible server: it starts a child (an engine worker), then serves /health,
# or exits, or hangs, as its mode says.
STUB = """
import http.server, subprocess, sys, time
port, mode = int(sys.argv[1]), sys.argv[2]
print("stub starting", flush=True)
if mode == "exit":
    print("RuntimeError: engine core failed to start", flush=True)
    sys.exit(3)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(f"child {child.pid}", flush=True)
if mode == "hang":
    time.sleep(300)

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


@pytest.fixture
def stub(tmp_path):
    path = tmp_path / "stub_server.py"
    path.write_text(STUB)
    return path


def make_server(stub, tmp_path, mode: str) -> Server:
    port = free_port()
    return Server(kind="vllm", model="stub-model", served_name="stub", port=port,
                  command=[sys.executable, str(stub), str(port), mode], env={}, log_path=tmp_path / f"{mode}.log",
                  devices=[])


def child_pid(log) -> int:
    for line in log.read_text().splitlines():
        if line.startswith("child "):
            return int(line.split()[1])
    raise AssertionError("the stub never started its child")


def gone(pid: int, within_s: float = 5) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # a zombie of ours still answers kill(0): reap it if it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return False


def test_a_healthy_server_is_stopped_with_its_whole_process_group(stub, tmp_path):
    server = make_server(stub, tmp_path, "serve")
    server.start(health_timeout_s=30)
    assert server.alive() and server.started_s > 0
    worker = child_pid(server.log_path)
    server.stop(grace_s=2)
    assert not server.alive()
    assert gone(worker), "the engine worker outlived its server"
    assert "pytest-rocm: healthy after" in server.log_path.read_text()


def test_a_server_that_exits_before_healthy_fails_with_its_log_and_the_infra_signature(stub, tmp_path):
    server = make_server(stub, tmp_path, "exit")
    with pytest.raises(ServerStartError) as info:
        server.start(health_timeout_s=30)
    message = str(info.value)
    assert "vllm server exited with code 3 before becoming healthy" in message
    assert "engine core failed to start" in message  # the last lines of its log
    assert find_signature([message], build_signatures())["name"] == "server_not_healthy"


def test_a_server_that_never_becomes_healthy_is_killed_with_its_workers(stub, tmp_path):
    server = make_server(stub, tmp_path, "hang")
    start = time.monotonic()
    with pytest.raises(ServerStartError, match=r"did not become healthy within 2 s"):
        server.start(health_timeout_s=2)
    assert time.monotonic() - start < 20
    assert not server.alive()
    assert gone(child_pid(server.log_path))


def stub_pool(stub, tmp_path, max_alive: int) -> ServerPool:
    def command(kind, model, name, port, args, python):
        return [sys.executable, str(stub), str(port), "serve", *args]

    return ServerPool(session_id="lifecycle", platform=builtin("cpu"), platform_keys=["cpu"], config_path=None,
                      log_dir=tmp_path / "servers", max_alive=max_alive, command=command)


def test_the_pool_shares_a_server_and_evicts_the_least_recently_used_idle_one(stub, tmp_path):
    pool = stub_pool(stub, tmp_path, max_alive=1)
    model = ServedModel(path="stub-model", name="stub")
    try:
        first = pool.get("vllm", model, ["--variant", "a"])
        again = pool.get("vllm", model, ["--variant", "a"])
        assert again is first  # same settings: the same process
        other = pool.get("vllm", model, ["--variant", "b"])  # both held: over the limit, nothing stopped
        assert other is not first and first.alive() and other.alive()
        pool.release(first)
        pool.release(again)  # `first` is idle now: the oldest idle server goes to keep one alive
        assert not first.alive() and other.alive()
        pool.release(other)
        third = pool.get("vllm", model, ["--variant", "c"])  # `other` idle: stopped to make room
        assert not other.alive() and third.alive()
    finally:
        pool.close()
    assert pool.alive() == []
