"""Accuracy through lm-eval against the live server (`local-completions`), gated per platform and
framework.

`arith_mini` ships with the suites and runs on every runner: on the tiny random model its score is
near zero, which is fine, the gate proves the whole path (lm-eval, the server, the baseline for the
platform key). The configs in `configs/` name real models and the upstream tasks they are gated on
(vLLM's lm-eval config format, plus an optional `group` for a model that gates another group); they
run where the weights are (`--rocm-model-dir`), and say so where they are not.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from gate_support import check_all

# lm-eval reads datasets through Hugging Face `datasets`: never let it reach for the network.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytestmark = pytest.mark.rocm_gate(group="accuracy")

HERE = Path(__file__).parent
TASKS = HERE / "tasks"


def _config_param(path: Path):
    """A config, read once, as a test parameter, in its `group` when it names one (our key beside
    vLLM's format): a real MoE model gates the distributed_moe group on the runners that have its
    weights."""
    try:
        config, problem = yaml.safe_load(path.read_text()) or {}, None
    except yaml.YAMLError as exc:
        config, problem = {}, f"{path}: not valid YAML, fix the file ({' '.join(str(exc).split())})"
    if problem or not isinstance(config, dict):
        pytest.fail(
            problem or f"{path}: must be a mapping of vLLM's lm-eval config keys", pytrace=False
        )
    group = config.get("group")
    return pytest.param(
        config, id=path.stem, marks=[pytest.mark.rocm_gate(group=group)] if group else []
    )


CONFIGS = [_config_param(path) for path in sorted((HERE / "configs").glob("*.yaml"))]


def run_lm_eval(
    server, model_name: str, task: str, include_path: Path | None, num_fewshot=None, limit=None
) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    model_args = (
        f"base_url={server.base_url}/completions,model={model_name},tokenizer_backend=None,"
        "tokenized_requests=False,num_concurrent=4,max_retries=1,timeout=300"
    )
    return simple_evaluate(
        model="local-completions",
        model_args=model_args,
        tasks=[task],
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=TaskManager(include_path=str(include_path) if include_path else None),
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )


def local_task(tmp_path: Path, name: str) -> Path:
    """The shipped task with its data files made absolute (`datasets` reads them from the working
    folder)."""
    folder = TASKS / name
    config = yaml.safe_load((folder / f"{name}.yaml").read_text())
    files = config["dataset_kwargs"]["data_files"]
    config["dataset_kwargs"]["data_files"] = {
        split: str(folder / path) for split, path in files.items()
    }
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return tmp_path


def test_arith_mini(server, framework, accuracy_gate, tmp_path):
    """The shipped task through each framework's OpenAI completions endpoint (lm-eval's
    `local-completions`)."""
    results = run_lm_eval(
        server, server.served_name, "arith_mini", local_task(tmp_path, "arith_mini")
    )
    assert results["n-samples"]["arith_mini"]["effective"] == 40, results["n-samples"]
    scores = results["results"]["arith_mini"]
    check_all(
        lambda metric=metric: accuracy_gate.check(metric, scores[metric])
        for metric in ("exact_match,strict-match", "exact_match,flexible-extract")
    )


def model_dir(config) -> Path | None:
    value = config.getoption("rocm_model_dir") or os.environ.get("PYTEST_ROCM_MODEL_DIR")
    return Path(value) if value else None


@pytest.mark.parametrize("config", CONFIGS)
def test_real_model(config, request, vllm_server_factory, accuracy_gate):
    root = model_dir(request.config)
    weights = root / config["model_name"] if root else None
    if weights is None or not (weights / "config.json").is_file():
        pytest.skip(
            f"model weights are not available on this runner ({config['model_name']}: "
            f"{'no --rocm-model-dir given' if root is None else f'{weights} has no config.json'})"
        )
    from pytest_rocm.serving.pool import ServedModel

    model = ServedModel(
        path=str(weights), name=config["model_name"], vllm_args=tuple(config.get("server_args", []))
    )
    server = vllm_server_factory(model=model)
    for task in config["tasks"]:
        results = run_lm_eval(
            server, model.name, task["name"], None, config.get("num_fewshot"), config.get("limit")
        )
        scores = results["results"][task["name"]]
        check_all(
            lambda name=metric["name"], scores=scores: accuracy_gate.check(name, scores[name])
            for metric in task["metrics"]
        )
