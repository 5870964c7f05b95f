"""Speech to text through `/v1/audio/transcriptions`, served for real: a tiny Whisper model (random weights built
at test time) transcribes a WAV into transformers' greedy text for the same audio; the audio decides the text; a
file that is not audio is a 400 in OpenAI's error shape and the server keeps serving.

The endpoint returns text only, so texts are compared: decoded without special tokens, except that vLLM holds
back a trailing incomplete UTF-8 sequence (it is waiting for the next byte) where transformers' decode shows it
as U+FFFD. On GPU runners the served dtype differs from the reference's float32, and near-ties may break the
other way: there the test compares the first half of the text.
"""

from __future__ import annotations

import pytest

from gate_support import client_for, gpu_runner
from media import WhisperReference, openai_error_problem, wav_bytes

# Whisper's decoder is short (448 positions); this length keeps each transcription to at most 44 tokens.
MAX_MODEL_LEN = 48
pytestmark = [pytest.mark.rocm_gate(group="multimodal"),
              pytest.mark.vllm_server(tiny_model={"architecture": "whisper"}, args=["--max-model-len", str(MAX_MODEL_LEN)])]
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module")
def whisper(tiny_model):
    return tiny_model(architecture="whisper")


@pytest.fixture(scope="module")
def server(vllm_server):
    return vllm_server


@pytest.fixture(scope="module")
def reference(whisper):
    return WhisperReference(whisper.path)


def _transcribe(server, whisper, wav: bytes) -> str:
    return client_for(server).audio.transcriptions.create(model=whisper.name, file=("clip.wav", wav, "audio/wav"),
                                                          language="en", response_format="json").text


def _same_text(served: str, expected: str) -> bool:
    if served == expected:
        return True
    held_back = expected.rstrip("\ufffd")
    return held_back != expected and served == held_back


@pytest.mark.parametrize("seed", SEEDS)
def test_transcription_matches_transformers(server, whisper, reference, seed):
    wav = wav_bytes(seed)
    served = _transcribe(server, whisper, wav)
    expected_ids = reference.greedy_ids(wav, MAX_MODEL_LEN)
    expected = reference.text(expected_ids)
    if gpu_runner():
        served, expected = served[: len(expected) // 2], expected[: len(expected) // 2]
    assert _same_text(served, expected), (
        f"clip {seed}: vLLM transcribed {served!r}, transformers {expected!r} (its token ids {expected_ids})")


def test_the_audio_decides_the_text(server, whisper):
    texts = {seed: _transcribe(server, whisper, wav_bytes(seed)) for seed in SEEDS}
    assert len(set(texts.values())) > 1, f"three different clips gave the same text: {texts}"


@pytest.mark.parametrize("payload", [b"this is not audio", wav_bytes(1)[:30]], ids=["not-audio", "truncated-wav"])
def test_a_bad_audio_file_is_a_400_and_the_server_keeps_serving(server, whisper, payload):
    import httpx

    response = httpx.post(server.base_url + "/audio/transcriptions", timeout=120,
                          data={"model": whisper.name, "language": "en"},
                          files={"file": ("clip.wav", payload, "audio/wav")})
    try:
        body = response.json()
    except ValueError:
        body = {"unparsed": response.text[:300]}
    problem = openai_error_problem(response.status_code, body)
    assert problem is None, f"a bad audio file: {problem}"
    assert _transcribe(server, whisper, wav_bytes(2)), "after the bad file the server returned no text"
