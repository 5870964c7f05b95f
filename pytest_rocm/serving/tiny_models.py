"""Tiny models built at test time, so the suites run the real engine with no download
(docs/architecture.md, "The embedded default").

A Llama-style model (hidden size 128, 2 layers, 2 attention heads, 1 KV head of
dimension 64: the CPU attention kernel rejects smaller heads) with random weights
from a fixed seed, and a byte-level BPE tokenizer trained on a text that ships
with Python, with a chat template that renders tools Hermes-style so vLLM's
`hermes` tool parser works. The folder is built once per cache folder and spec:
its name carries a digest of everything that decides the weights (the spec, the
training text, the torch and transformers versions, and for the newer
architectures this module's source), so a changed input builds a new model
instead of silently reusing an old one.

The other architectures of the gate groups share that text model's sizes:
Mistral (sliding window), Mixtral and Qwen3-MoE (mixture of experts),
DeepSeek-V2 (multi-head latent attention, a shared expert, a dense first layer),
Idefics3 (images through a SigLIP-style tower; no torchvision needed),
Whisper (speech to text), and for GPU runners LLaVA (CLIP tower), PaliGemma and
Gemma 3 (SigLIP towers), which vLLM cannot serve on its CPU backend.
Qwen2-VL is not here: transformers 5.19 cannot build its processor without
torchvision (the video processor is part of it).

Built in a subprocess (`python -m pytest_rocm.serving.tiny_models`): torch and
transformers stay out of the pytest processes, and a GPU runner's controller
never initialises HIP before xdist forks.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from pytest_rocm.errors import NotDone

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
    # Other architectures of the gate groups; at their defaults they leave the Llama model's digest
    # as it was.
    architecture: str = "llama"  # one of ARCHITECTURES
    sliding_window: int | None = None
    num_local_experts: int = 8
    num_experts_per_tok: int = 2

    def fields(self) -> dict:
        """The spec as it decides the weights: the architecture's own fields only where they apply
        (so the Llama model's digest, and its cached folder, stay what they were before there were
        others)."""
        data = asdict(self)
        for key in ("architecture", "sliding_window", "num_local_experts", "num_experts_per_tok"):
            data.pop(key)
        if self.architecture != "llama":
            data["architecture"] = self.architecture
            if self.sliding_window is not None:
                data["sliding_window"] = self.sliding_window
            if self.architecture in MOE_ARCHITECTURES:
                data.update(
                    num_local_experts=self.num_local_experts,
                    num_experts_per_tok=self.num_experts_per_tok,
                )
            if self.architecture in BUILDERS_IN_DIGEST:
                # What these builders choose (tower sizes, special tokens, templates) is in this
                # module's code, not in the spec: any change to it builds their folders anew.
                data["builder"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
        return data

    def training_text(self) -> str:
        return Path(inspect.getsourcefile(textwrap)).read_text()

    def digest(self) -> str:
        versions = {name: _version(name) for name in ("torch", "transformers", "tokenizers")}
        blob = json.dumps(
            {
                "spec": self.fields(),
                "versions": versions,
                "text": hashlib.sha256(self.training_text().encode()).hexdigest(),
                "template": CHAT_TEMPLATE,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def folder_name(self) -> str:
        return f"tiny-{self.architecture}-seed{self.seed}-{self.digest()}"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class ModelBuildError(NotDone):
    pass


def spec_problem(spec) -> str | None:
    """What is wrong with a tiny model's spec (a dict of TinyModelSpec fields), or None: checked
    before a build (a marker's at collection), so a typo is named instead of failing in the build's
    subprocess."""
    known = {field.name for field in dataclasses.fields(TinyModelSpec)}
    if not isinstance(spec, dict) or not all(isinstance(key, str) for key in spec):
        return f"must be a dict of TinyModelSpec fields, got {spec!r}"
    unknown = sorted(set(spec) - known)
    if unknown:
        return f"has unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}"
    if spec.get("architecture", "llama") not in ARCHITECTURES:
        return f"architecture {spec['architecture']!r} is not one of {', '.join(ARCHITECTURES)}"
    return None


def ensure_tiny_model(cache_dir: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """The model's folder under `cache_dir`, built first if it is not there (once across
    processes)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / spec.folder_name()
    with FileLock(str(target) + ".lock"):
        if (target / SPEC_FILE).is_file():
            return target
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=cache_dir))
        try:
            command = [
                sys.executable,
                "-m",
                "pytest_rocm.serving.tiny_models",
                str(staging),
                "--spec",
                json.dumps(asdict(spec)),
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
                raise ModelBuildError(
                    f"building the tiny model into {target} failed (exit code {done.returncode}); "
                    f"needs torch, transformers and tokenizers (`pip install -e .[suites]`):\n{tail}"
                )
            # whole folder or nothing: a killed build leaves only a staging folder
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def build(out: Path, spec: TinyModelSpec) -> None:
    """Train the tokenizer and write the model with random weights from `spec.seed` (runs in the
    subprocess)."""
    if spec.architecture not in ARCHITECTURES:
        raise ValueError(f"unknown architecture {spec.architecture!r} ({', '.join(ARCHITECTURES)})")
    import torch

    torch.manual_seed(spec.seed)
    ARCHITECTURES[spec.architecture](out, spec)
    (out / SPEC_FILE).write_text(
        json.dumps(
            {
                "spec": spec.fields(),
                "digest": spec.digest(),
                "versions": {n: _version(n) for n in ("torch", "transformers", "tokenizers")},
            },
            indent=2,
        )
    )


def _bpe(spec: TinyModelSpec, special_tokens: list[str]):
    """A byte-level BPE tokenizer trained on the spec's text, with these special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        show_progress=False,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator([spec.training_text()], trainer)
    return tokenizer


def _text_tokenizer(
    spec: TinyModelSpec, extra_special: list[str] = (), named_special: dict | None = None
):
    """The trained BPE as a transformers tokenizer. `named_special`: special tokens a processor
    finds by attribute name (Gemma 3's `tokenizer.boi_token` and so on), saved with the
    tokenizer."""
    from transformers import PreTrainedTokenizerFast

    extra_special = [*extra_special, *(named_special or {}).values()]
    tokenizer = _bpe(spec, ["<s>", "</s>", "<pad>", "<tool_call>", "</tool_call>", *extra_special])
    named = {"model_specific_special_tokens": named_special} if named_special else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        additional_special_tokens=["<tool_call>", "</tool_call>", *extra_special],
        **named,
    )


def _text_config(spec: TinyModelSpec, tokenizer) -> dict:
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
        # A wider init than Llama's 0.02 makes the random model's next-token choices decisive, so
        # greedy decoding is not decided by float rounding between near-equal logits.
        initializer_range=0.2,
    )


def _save_causal_lm(out: Path, spec: TinyModelSpec, config_class, model_class, **extra) -> None:
    tokenizer = _text_tokenizer(spec)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    model_class(config_class(**{**_text_config(spec, tokenizer), **extra})).save_pretrained(out)


def _build_llama(out: Path, spec: TinyModelSpec) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    _save_causal_lm(out, spec, LlamaConfig, LlamaForCausalLM)


def _build_mistral(out: Path, spec: TinyModelSpec) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    _save_causal_lm(
        out, spec, MistralConfig, MistralForCausalLM, sliding_window=spec.sliding_window
    )


def _build_mixtral(out: Path, spec: TinyModelSpec) -> None:
    from transformers import MixtralConfig, MixtralForCausalLM

    _save_causal_lm(
        out,
        spec,
        MixtralConfig,
        MixtralForCausalLM,
        num_local_experts=spec.num_local_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        sliding_window=spec.sliding_window,
    )


def _build_qwen3_moe(out: Path, spec: TinyModelSpec) -> None:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    # vLLM's CPU fused-MoE kernel needs the experts' intermediate size to be a multiple of 32.
    _save_causal_lm(
        out,
        spec,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
        num_experts=spec.num_local_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        moe_intermediate_size=64,
        decoder_sparse_step=1,
        norm_topk_prob=True,
    )


def _build_deepseek_v2(out: Path, spec: TinyModelSpec) -> None:
    from transformers import DeepseekV2Config, DeepseekV2ForCausalLM

    # Multi-head latent attention at DeepSeek-V2's own latent sizes (KV rank 512, rotary part 64), a
    # shared expert beside the routed ones, and a dense first layer: the paths MLA and DeepSeek MoE
    # kernels take.
    _save_causal_lm(
        out,
        spec,
        DeepseekV2Config,
        DeepseekV2ForCausalLM,
        num_key_value_heads=spec.num_attention_heads,
        kv_lora_rank=512,
        q_lora_rank=None,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        n_routed_experts=spec.num_local_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        n_shared_experts=1,
        moe_intermediate_size=64,
        first_k_dense_replace=1,
        topk_method="greedy",
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.0,
    )


# Idefics3's chat format; image parts become `<image>`, which the processor expands to the image's
# tokens.
IDEFICS3_CHAT_TEMPLATE = (
    "<s>{% for m in messages %}{{ m['role'] | capitalize }}:"
    "{% if m['content'] is string %} {{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %} {{ part['text'] }}{% elif part['type'] == 'image' %}<image>{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)


def _build_idefics3(out: Path, spec: TinyModelSpec) -> None:
    """An image-text model: a 32x32 image is 16 patches of 8x8, pixel-shuffled by 2 into 4 image
    tokens. The PIL image processor (no torchvision), resizing every image to 32x32 without
    splitting it into tiles."""
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessorPil,
        Idefics3Processor,
        LlamaConfig,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig

    tokenizer = _text_tokenizer(
        spec, ["<image>", "<fake_token_around_image>", "<global-img>", "<end_of_utterance>"]
    )
    tokenizer.chat_template = IDEFICS3_CHAT_TEMPLATE
    image_processor = Idefics3ImageProcessorPil(
        do_resize=True,
        size={"longest_edge": 32},
        max_image_size={"longest_edge": 32},
        do_image_splitting=False,
    )
    Idefics3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_len=4,
        chat_template=IDEFICS3_CHAT_TEMPLATE,
    ).save_pretrained(out)
    text = LlamaConfig(**_text_config(spec, tokenizer))
    vision = Idefics3VisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=32,
        patch_size=8,
        num_channels=3,
        initializer_range=0.2,
    )
    config = Idefics3Config(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        scale_factor=2,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
    )
    config.initializer_range = 0.2
    Idefics3ForConditionalGeneration(config).save_pretrained(out)


def _build_whisper(out: Path, spec: TinyModelSpec) -> None:
    """A speech-to-text model: Whisper's 80 mel bins and 30 s window (1500 encoder positions), with
    Whisper's special tokens (every language, the tasks, `<|notimestamps|>`) around the trained BPE
    vocabulary. Tied embeddings, as in every Whisper checkpoint: vLLM drops `proj_out` and always
    ties it to the embedding. Init 0.5: at 0.2 the random decoder repeats one token whatever it
    hears."""
    from transformers import (
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizer,
    )
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    trained = json.loads(_bpe(spec, ["<|endoftext|>"]).to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in trained["merges"]]
    tokenizer = WhisperTokenizer(vocab=trained["vocab"], merges=merges)
    tokenizer.add_special_tokens(
        {
            "additional_special_tokens": [
                "<|startoftranscript|>",
                *(f"<|{code}|>" for code in LANGUAGES),
                "<|translate|>",
                "<|transcribe|>",
                "<|startoflm|>",
                "<|startofprev|>",
                "<|nospeech|>",
                "<|notimestamps|>",
            ]
        }
    )
    WhisperProcessor(
        feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer
    ).save_pretrained(out)
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = WhisperConfig(
        vocab_size=len(tokenizer),
        num_mel_bins=80,
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        max_source_positions=1500,
        max_target_positions=448,
        bos_token_id=end,
        eos_token_id=end,
        pad_token_id=end,
        decoder_start_token_id=tokenizer.convert_tokens_to_ids("<|startoftranscript|>"),
        suppress_tokens=None,
        begin_suppress_tokens=None,
        tie_word_embeddings=True,
        init_std=0.5,
    )
    WhisperForConditionalGeneration(config).save_pretrained(out)


# Image-text architectures that vLLM serves on GPU runners only: its code for them imports
# torchvision (no build for torch+cpu; LLaVA and PaliGemma through vision.get_vision_encoder_info,
# which imports the Pixtral model, Gemma 3 through its image processor), and PaliGemma and Gemma 3
# need prefix-LM attention, which the CPU backend lacks. The towers are tiny (32x32 images in 8x8
# patches) like Idefics3's; the PIL image processors keep torchvision out.
TOWER = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    image_size=32,
    patch_size=8,
    initializer_range=0.2,
)
# Gemma tokenizers have newline runs as tokens, and vLLM's Gemma processors look them up by text.
GEMMA_NEWLINES = ["\n", "\n\n", "\n\n\n", "\n\n\n\n"]


def _tower_under_vision_model(out: Path) -> None:
    """Move a CLIP/SigLIP tower's weights under `vision_tower.vision_model.`, where published
    checkpoints and vLLM keep them; transformers 5 saves them one level up and loads both
    layouts."""
    from safetensors.torch import load_file, save_file

    path = out / "model.safetensors"
    tensors = load_file(path)
    moved = {
        (
            "vision_tower.vision_model." + key[len("vision_tower.") :]
            if key.startswith("vision_tower.") and not key.startswith("vision_tower.vision_model.")
            else key
        ): value
        for key, value in tensors.items()
    }
    save_file(moved, path, metadata={"format": "pt"})


LLAVA_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | upper }}: {% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<image>\n{% endif %}"
    "{% endfor %}{% endif %}\n{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def _build_llava(out: Path, spec: TinyModelSpec) -> None:
    """LLaVA-1.5: a CLIP tower (16 patch tokens per image, its class token dropped) and a two-layer
    projector."""
    from transformers import (
        CLIPImageProcessorPil,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    tokenizer = _text_tokenizer(spec, ["<image>"])
    tokenizer.chat_template = LLAVA_CHAT_TEMPLATE
    image_processor = CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=8,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=LLAVA_CHAT_TEMPLATE,
    ).save_pretrained(out)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**TOWER, projection_dim=64).to_dict(),
        text_config=LlamaConfig(**_text_config(spec, tokenizer)).to_dict(),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        tie_word_embeddings=False,
    )
    config.initializer_range = 0.2
    LlavaForConditionalGeneration(config).save_pretrained(out)
    _tower_under_vision_model(out)


# PaliGemma has no chat format: its processor puts the image tokens and BOS before the text and a
# newline after it, so the chat template renders the text parts only (the OpenAI chat API needs a
# template).
PALIGEMMA_CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for part in m['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}"
    "{% endif %}{% endfor %}"
)


def _build_paligemma(out: Path, spec: TinyModelSpec) -> None:
    """PaliGemma: a SigLIP tower (16 image tokens) before a Gemma decoder; the prompt is the image tokens, BOS,
    the text and a newline (the processor adds the location and segmentation tokens to the
    vocabulary)."""
    from transformers import (
        GemmaConfig,
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessorPil,
        SiglipVisionConfig,
    )

    tokenizer = _text_tokenizer(spec, ["<image>"])
    tokenizer.add_tokens(GEMMA_NEWLINES)
    image_processor = SiglipImageProcessorPil(size={"height": 32, "width": 32})
    image_processor.image_seq_length = (TOWER["image_size"] // TOWER["patch_size"]) ** 2
    tokenizer.chat_template = PALIGEMMA_CHAT_TEMPLATE
    processor = PaliGemmaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=PALIGEMMA_CHAT_TEMPLATE
    )
    processor.save_pretrained(out)
    text = GemmaConfig(**{**_text_config(spec, tokenizer), "vocab_size": len(processor.tokenizer)})
    config = PaliGemmaConfig(
        vision_config=SiglipVisionConfig(**TOWER).to_dict(),
        text_config=text.to_dict(),
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=spec.hidden_size,
        vocab_size=len(processor.tokenizer),
    )
    config.initializer_range = 0.2
    PaliGemmaForConditionalGeneration(config).save_pretrained(out)
    _tower_under_vision_model(out)


GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% else %}<start_of_image>{% endif %}{% endfor %}{% endif %}"
    "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def _build_gemma3(out: Path, spec: TinyModelSpec) -> None:
    """Gemma 3: a SigLIP tower pooled to 4 soft tokens per image between `<start_of_image>` and
    `<end_of_image>`. Its projection initialises to zeros (the image would not reach the decoder):
    re-randomised here."""
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessorPil,
        Gemma3Processor,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    tokenizer = _text_tokenizer(
        spec,
        named_special={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
    )
    tokenizer.add_tokens(GEMMA_NEWLINES)
    tokenizer.chat_template = GEMMA3_CHAT_TEMPLATE
    image_processor = Gemma3ImageProcessorPil(
        size={"height": 32, "width": 32}, do_pan_and_scan=False
    )
    Gemma3Processor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        image_seq_length=4,
        chat_template=GEMMA3_CHAT_TEMPLATE,
    ).save_pretrained(out)
    # Untied: with the embedding as output layer (scaled by sqrt(hidden) on the way in) the random model only
    # repeats the prompt's last token.
    text = Gemma3TextConfig(
        **_text_config(spec, tokenizer),
        query_pre_attn_scalar=spec.head_dim,
        tie_word_embeddings=False,
    )
    config = Gemma3Config(
        text_config=text.to_dict(),
        vision_config=SiglipVisionConfig(**TOWER).to_dict(),
        mm_tokens_per_image=4,
        boi_token_index=tokenizer.boi_token_id,
        eoi_token_index=tokenizer.eoi_token_id,
        image_token_index=tokenizer.image_token_id,
        initializer_range=0.2,
        tie_word_embeddings=False,
    )
    model = Gemma3ForConditionalGeneration(config)
    torch.nn.init.normal_(model.model.multi_modal_projector.mm_input_projection_weight, std=0.2)
    model.save_pretrained(out)
    _tower_under_vision_model(out)


ARCHITECTURES = {
    "llama": _build_llama,
    "mistral": _build_mistral,
    "mixtral": _build_mixtral,
    "qwen3_moe": _build_qwen3_moe,
    "deepseek_v2": _build_deepseek_v2,
    "idefics3": _build_idefics3,
    "whisper": _build_whisper,
    "llava": _build_llava,
    "paligemma": _build_paligemma,
    "gemma3": _build_gemma3,
}
MOE_ARCHITECTURES = ("mixtral", "qwen3_moe", "deepseek_v2")
# The first three keep the digests (and cached folders) they had before the builders were split out.
BUILDERS_IN_DIGEST = (
    "qwen3_moe",
    "deepseek_v2",
    "idefics3",
    "whisper",
    "llava",
    "paligemma",
    "gemma3",
)
# Image-text architectures vLLM cannot serve on its CPU backend (see TOWER above): GPU runners only.
GPU_ONLY_IMAGE_ARCHITECTURES = ("llava", "paligemma", "gemma3")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Build a tiny model with random weights (no download)."
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--spec", default="{}", help="TinyModelSpec fields as JSON")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    build(args.out, TinyModelSpec(**json.loads(args.spec)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
