"""Speech to text through `/v1/audio/transcriptions`, served for real: a tiny Whisper model (random
weights built at test time) transcribes a WAV into transformers' greedy text for the same audio; the
audio decides the text; a file that is not audio is a 400 in OpenAI's error shape and the server
keeps serving.

The endpoint returns text only, so texts are compared: decoded without special tokens, except that
vLLM holds back a trailing incomplete UTF-8 sequence (it is waiting for the next byte) where
transformers' decode shows it as U+FFFD. On GPU runners the served dtype differs from the
reference's float32, and near-ties may break the other way: there the test compares the first half
of the text.
"""

from __future__ import annotations

import openai
import pytest
from gate_support import assert_openai_error, gpu_runner
from media import WhisperReference, wav_bytes

# Whisper's decoder is short (448 positions); this length keeps each transcription to at most 44
# tokens.
MAX_MODEL_LEN = 48
pytestmark = [
    pytest.mark.rocm_gate(group="multimodal"),
    pytest.mark.vllm_server(
        tiny_model={"architecture": "whisper"}, args=["--max-model-len", str(MAX_MODEL_LEN)]
    ),
]
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def reference(vllm_server):
    return WhisperReference(vllm_server.model)  # the folder the module's server serves


def _transcribe(client, model_name, wav: bytes) -> str:
    return client.audio.transcriptions.create(
        model=model_name, file=("clip.wav", wav, "audio/wav"), language="en", response_format="json"
    ).text


def _same_text(served: str, expected: str) -> bool:
    if served == expected:
        return True
    held_back = expected.rstrip("\ufffd")
    return held_back != expected and served == held_back


@pytest.mark.parametrize("seed", SEEDS)
def test_transcription_matches_transformers(client, model_name, reference, seed):
    wav = wav_bytes(seed)
    served = _transcribe(client, model_name, wav)
    expected_ids = reference.greedy_ids(wav, MAX_MODEL_LEN)
    expected = reference.text(expected_ids)
    if gpu_runner():
        served, expected = served[: len(expected) // 2], expected[: len(expected) // 2]
    assert _same_text(served, expected), (
        f"clip {seed}: vLLM transcribed {served!r}, transformers {expected!r} (its token ids {expected_ids})"
    )


def test_the_audio_decides_the_text(client, model_name):
    texts = {seed: _transcribe(client, model_name, wav_bytes(seed)) for seed in SEEDS}
    assert len(set(texts.values())) > 1, f"three different clips gave the same text: {texts}"


@pytest.mark.parametrize(
    "payload", [b"this is not audio", wav_bytes(1)[:30]], ids=["not-audio", "truncated-wav"]
)
def test_a_bad_audio_file_is_a_400_and_the_server_keeps_serving(client, model_name, payload):
    with pytest.raises(openai.APIStatusError) as raised:
        _transcribe(client, model_name, payload)
    assert_openai_error(raised.value, "a bad audio file", status=400)
    assert _transcribe(client, model_name, wav_bytes(2)), (
        "after the bad file the server returned no text"
    )
