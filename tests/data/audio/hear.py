"""Asks a model what a WAV file says through an official client, as its users would, and
prints the text the client handed back as one JSON line: {"text": ...}.

usage: hear.py WAY URL TOKEN MODEL WAV
  WAY: transcribe (the openai SDK's audio.transcriptions) | chat (its chat completions,
       input_audio) | responses (its Responses API, input_audio) | genai (google-genai,
       inlineData audio/wav)
Greedy (temperature 0), at most 8 tokens an answer (a transcription is held by the server).
"""
import base64
import json
import sys

way, url, token, model, wav = sys.argv[1:6]
QUESTION = "Which word does this sound say? Answer with one word."
with open(wav, "rb") as f:
    raw = f.read()
data = base64.b64encode(raw).decode()


def openai_client():
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=token, max_retries=0, timeout=300)


def transcribe():
    with open(wav, "rb") as f:
        return openai_client().audio.transcriptions.create(model=model, file=f, temperature=0).text


def chat():
    content = [{"type": "text", "text": QUESTION},
               {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]
    r = openai_client().chat.completions.create(
        model=model, messages=[{"role": "user", "content": content}], temperature=0,
        max_tokens=8)
    return r.choices[0].message.content


def responses():
    content = [{"type": "input_text", "text": QUESTION},
               {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}]
    r = openai_client().responses.create(
        model=model, input=[{"role": "user", "content": content}], temperature=0,
        max_output_tokens=16)
    return r.output_text


def genai():
    from google import genai as g
    from google.genai import types

    client = g.Client(api_key=token, http_options=types.HttpOptions(base_url=url))
    contents = [types.Content(role="user", parts=[
        types.Part.from_text(text=QUESTION),
        types.Part.from_bytes(data=raw, mime_type="audio/wav"),
    ])]
    config = types.GenerateContentConfig(temperature=0, max_output_tokens=8)
    return client.models.generate_content(model=model, contents=contents, config=config).text


ways = {"transcribe": transcribe, "chat": chat, "responses": responses, "genai": genai}
print(json.dumps({"text": ways[way]()}))
