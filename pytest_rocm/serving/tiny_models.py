"""Tiny models built at test time, so the suites run the real engine with no download (DESIGN section 6).

A Llama-style model (hidden size 128, 2 layers, 2 attention heads, 1 KV head of
dimension 64: the CPU attention kernel rejects smaller heads) with random weights
from a fixed seed, and a byte-level BPE tokenizer trained on a text that ships
with Python, with a chat template that renders tools Hermes-style so vLLM's
`hermes` tool parser works. The folder is built once per cache folder and spec:
its name carries a digest of everything that decides the weights (the spec, the
training text, the torch and transformers versions), so a changed input builds a
new model instead of silently reusing an old one.

Built in a subprocess (`python -m pytest_rocm.serving.tiny_models`): torch and
transformers stay out of the pytest processes, and a GPU runner's controller
never initialises HIP before xdist forks.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock

SPEC_FILE = "pytest-rocm-model.json"
BUILD_TIMEOUT_S = 600

CHAT_TEMPLATE = (
    "{% if tools %}<s>system: tools:\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}{% endif %}"
    "{% for m in messages %}<s>{{ m['role'] }}: "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% elif m['content'] %}{% for part in m['content'] %}{{ part['text'] }}{% endfor %}{% endif %}"
    "{% if m.get('tool_calls') %}{% for call in m['tool_calls'] %}<tool_call>"
    "{{ {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson }}"
    "</tool_call>{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Everything that decides the model's weights and tokenizer, besides the library versions."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 64
    max_position_embeddings: int = 1024
    # Other architectures of the gate groups; at their defaults they leave the Llama model's digest as it was.
    architecture: str = "llama"  # llama, mistral (sliding window), mixtral (mixture of experts)
    sliding_window: int | None = None
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    def fields(self) -> dict:
        """The spec as it decides the weights: the architecture's own fields only where they apply (so the
        Llama model's digest, and its cached folder, stay what they were before there were others)."""
        data = asdict(self)
        for key in ("architecture", "sliding_window", "num_local_experts", "num_experts_per_tok"):
            data.pop(key)
        if self.architecture != "llama":
            data["architecture"] = self.architecture
            if self.sliding_window is not None:
                data["sliding_window"] = self.sliding_window
            if self.architecture == "mixtral":
                data.update(num_local_experts=self.num_local_experts, num_experts_per_tok=self.num_experts_per_tok)
        return data

    def training_text(self) -> str:
        return Path(inspect.getsourcefile(textwrap)).read_text()

    def digest(self) -> str:
        versions = {name: _version(name) for name in ("torch", "transformers", "tokenizers")}
        blob = json.dumps({"spec": self.fields(), "versions": versions,
                           "text": hashlib.sha256(self.training_text().encode()).hexdigest(),
                           "template": CHAT_TEMPLATE}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def folder_name(self) -> str:
        return f"tiny-{self.architecture}-seed{self.seed}-{self.digest()}"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class ModelBuildError(RuntimeError):
    pass


def ensure_tiny_model(cache_dir: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """The model's folder under `cache_dir`, built first if it is not there (once across processes)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / spec.folder_name()
    with FileLock(str(target) + ".lock"):
        if (target / SPEC_FILE).is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=cache_dir))
        try:
            command = [sys.executable, "-m", "pytest_rocm.serving.tiny_models", str(staging), "--spec", json.dumps(asdict(spec))]
            done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
                raise ModelBuildError(f"building the tiny model into {target} failed (exit code {done.returncode}); "
                                      f"needs torch, transformers and tokenizers (`pip install -e .[suites]`):\n{tail}")
            os.replace(staging, target)  # whole folder or nothing: a killed build leaves only a staging folder
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def build(out: Path, spec: TinyModelSpec) -> None:
    """Train the tokenizer and write the model with random weights from `spec.seed` (runs in the subprocess)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig,
                              MixtralForCausalLM, PreTrainedTokenizerFast)

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, show_progress=False,
                                  special_tokens=["<s>", "</s>", "<pad>", "<tool_call>", "</tool_call>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([spec.training_text()], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   additional_special_tokens=["<tool_call>", "</tool_call>"])
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(spec.seed)
    common = dict(vocab_size=len(fast), hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size,
                  num_hidden_layers=spec.num_hidden_layers, num_attention_heads=spec.num_attention_heads,
                  num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                  max_position_embeddings=spec.max_position_embeddings, bos_token_id=fast.bos_token_id,
                  eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, torch_dtype="float32")
    if spec.architecture == "mistral":
        config_class, model_class = MistralConfig, MistralForCausalLM
        common["sliding_window"] = spec.sliding_window
    elif spec.architecture == "mixtral":
        config_class, model_class = MixtralConfig, MixtralForCausalLM
        common.update(num_local_experts=spec.num_local_experts, num_experts_per_tok=spec.num_experts_per_tok,
                      sliding_window=spec.sliding_window)
    elif spec.architecture == "llama":
        config_class, model_class = LlamaConfig, LlamaForCausalLM
    else:
        raise ValueError(f"unknown architecture {spec.architecture!r} (llama, mistral, mixtral)")
    config = config_class(**common)
    # A wider init than Llama's 0.02 makes the random model's next-token choices decisive, so greedy
    # decoding is not decided by float rounding between near-equal logits.
    config.initializer_range = 0.2
    model_class(config).save_pretrained(out)
    (out / SPEC_FILE).write_text(json.dumps({"spec": spec.fields(), "digest": spec.digest(),
                                             "versions": {n: _version(n) for n in ("torch", "transformers", "tokenizers")}},
                                            indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a tiny Llama-style model with random weights (no download).")
    parser.add_argument("out", type=Path)
    parser.add_argument("--spec", default="{}", help="TinyModelSpec fields as JSON")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build(args.out, TinyModelSpec(**json.loads(args.spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
