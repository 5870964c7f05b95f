"""What the multimodal tests send and compare: images and sounds made from a seed, chat requests
carrying them, and transformers' own greedy output on the same inputs (the reference).

The media are made here, not downloaded: noise images and tones with noise, so two seeds give inputs
that a working vision or audio path must tell apart.
"""

from __future__ import annotations

import base64
import io

from gate_support import TOP_K, Generation, token_id

IMAGE_SIZE = (40, 48)  # not the tower's 32x32: the processor's resize is on the path under test
SAMPLE_RATE = 16_000


def image(seed: int):
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (*IMAGE_SIZE, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def png_bytes(seed: int) -> bytes:
    buffer = io.BytesIO()
    image(seed).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(payload: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(payload).decode()


def image_part(url: str) -> dict:
    return {"type": "image_url", "image_url": {"url": url}}


def user_message(question: str, image_urls: list[str]) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                *(image_part(url) for url in image_urls),
                {"type": "text", "text": question},
            ],
        }
    ]


def chat_greedy(
    client, model: str, messages: list[dict], max_tokens: int
) -> tuple[Generation, int]:
    """The served model's greedy tokens (EOS ignored) with their top-k logprobs, and its prompt's
    token count."""
    response = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.0,
        logprobs=True,
        top_logprobs=TOP_K,
        extra_body={"ignore_eos": True, "return_tokens_as_token_ids": True},
    )
    choice = response.choices[0]
    return (
        Generation(
            text=choice.message.content or "",
            token_ids=[token_id(t.token) for t in choice.logprobs.content],
            top_logprobs=[
                {token_id(top.token): top.logprob for top in t.top_logprobs}
                for t in choice.logprobs.content
            ],
            finish_reason=choice.finish_reason,
        ),
        response.usage.prompt_tokens,
    )


class ImageTextReference:
    """transformers' own model of any image-text architecture on the same folder (AutoProcessor and
    AutoModelForImageTextToText): the prompt its processor builds from the chat template, then
    greedy tokens with top-k logprobs through the KV cache (EOS ignored, like the served side)."""

    def __init__(self, model_path: str):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.torch = torch
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.model = AutoModelForImageTextToText.from_pretrained(
            model_path, dtype=torch.float32
        ).eval()

    def prompt(self, question: str, image_count: int) -> str:
        messages = [
            {
                "role": "user",
                "content": [
                    *({"type": "image"} for _ in range(image_count)),
                    {"type": "text", "text": question},
                ],
            }
        ]
        return self.processor.apply_chat_template(messages, add_generation_prompt=True)

    def greedy(
        self, question: str, image_seeds: list[int], max_tokens: int
    ) -> tuple[Generation, int]:
        torch = self.torch
        inputs = self.processor(
            text=self.prompt(question, len(image_seeds)),
            images=[[image(seed) for seed in image_seeds]],
            return_tensors="pt",
        )
        prompt_tokens, ids, tops = inputs["input_ids"].shape[1], [], []
        with torch.no_grad():
            out = self.model(**inputs, use_cache=True)
            for _ in range(max_tokens):
                values, indices = torch.log_softmax(out.logits[0, -1].float(), dim=-1).topk(TOP_K)
                tops.append(dict(zip(indices.tolist(), values.tolist())))
                ids.append(int(indices[0]))
                out = self.model(
                    input_ids=torch.tensor([[ids[-1]]]),
                    past_key_values=out.past_key_values,
                    use_cache=True,
                )
        return Generation(
            text="", token_ids=ids, top_logprobs=tops, finish_reason="length"
        ), prompt_tokens


def wav_bytes(seed: int, seconds: float = 1.5) -> bytes:
    """A tone at a seed-chosen pitch with a little noise, as 16-bit PCM WAV at 16 kHz."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(seed)
    t = np.arange(int(SAMPLE_RATE * seconds)) / SAMPLE_RATE
    samples = 0.3 * np.sin(2 * np.pi * rng.uniform(200, 800) * t) + 0.05 * rng.standard_normal(
        t.size
    )
    buffer = io.BytesIO()
    soundfile.write(buffer, samples.astype(np.float32), SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


class WhisperReference:
    """transformers' Whisper on the same folder: the log-mel features of the same WAV, the prompt
    vLLM builds (`<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`), greedy decoding until
    EOS or `max_length`."""

    PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]

    def __init__(self, model_path: str):
        import torch
        from transformers import WhisperForConditionalGeneration, WhisperProcessor

        self.torch = torch
        self.processor = WhisperProcessor.from_pretrained(model_path)
        self.model = WhisperForConditionalGeneration.from_pretrained(
            model_path, dtype=torch.float32
        ).eval()

    def greedy_ids(self, wav: bytes, max_length: int) -> list[int]:
        import soundfile

        torch, tokenizer = self.torch, self.processor.tokenizer
        samples, rate = soundfile.read(io.BytesIO(wav), dtype="float32")
        features = self.processor.feature_extractor(
            samples, sampling_rate=rate, return_tensors="pt"
        ).input_features
        ids = tokenizer.convert_tokens_to_ids(self.PROMPT)
        prompt_length = len(ids)
        with torch.no_grad():
            encoded = self.model.model.encoder(features)
            while len(ids) < max_length:
                logits = self.model(
                    encoder_outputs=encoded, decoder_input_ids=torch.tensor([ids])
                ).logits[0, -1]
                ids.append(int(logits.argmax()))
                if ids[-1] == tokenizer.eos_token_id:
                    break
        return ids[prompt_length:]

    def text(self, token_ids: list[int]) -> str:
        return self.processor.tokenizer.decode(token_ids, skip_special_tokens=True)
