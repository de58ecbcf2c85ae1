"""Asks a model about an image through an official client, as its users would, and prints what
the client handed back as one JSON line: {"text": ..., "cached": ..., "prompt": ...,
"first_prompt": ...} (the prompt's tokens, those of them read from the cache, and the first
turn's prompt tokens).

usage: ask.py SDK URL TOKEN MODEL IMAGE QUESTION [--again]
  SDK: openai (chat completions) | responses (the openai SDK's Responses API) | anthropic |
       genai | ollama (chat) | ollama_generate (/api/generate; no --again)
  --again: a second turn after the first answer, the image still in the conversation; the
           line is the second turn's (its cached tokens say whether the image was read again).
Greedy (temperature 0), at most 8 tokens an answer.
"""
import base64
import json
import mimetypes
import sys

sdk, url, token, model, image, question = sys.argv[1:7]
again = "--again" in sys.argv[7:]
mime = mimetypes.guess_type(image)[0] or "image/png"
with open(image, "rb") as f:
    raw = f.read()
data = base64.b64encode(raw).decode()
follow_up = "And again, in one word: what colour is the image?"
# The first turn's prompt tokens.
first = {}


def openai_ask():
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=token)
    messages = [{"role": "user", "content": [
        {"type": "text", "text": question},
        {"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}},
    ]}]
    r = client.chat.completions.create(model=model, messages=messages, temperature=0, max_tokens=8)
    first["prompt"] = r.usage.prompt_tokens
    if again:
        messages += [{"role": "assistant", "content": r.choices[0].message.content},
                     {"role": "user", "content": follow_up}]
        r = client.chat.completions.create(model=model, messages=messages, temperature=0,
                                           max_tokens=8)
    details = r.usage.prompt_tokens_details
    return r.choices[0].message.content, details.cached_tokens if details else 0, r.usage.prompt_tokens


def responses_ask():
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=token)
    items = [{"role": "user", "content": [
        {"type": "input_text", "text": question},
        {"type": "input_image", "image_url": f"data:{mime};base64,{data}"},
    ]}]
    r = client.responses.create(model=model, input=items, temperature=0, max_output_tokens=16)
    first["prompt"] = r.usage.input_tokens
    if again:
        items += [{"role": "assistant", "content": r.output_text},
                  {"role": "user", "content": follow_up}]
        r = client.responses.create(model=model, input=items, temperature=0,
                                    max_output_tokens=16)
    details = r.usage.input_tokens_details
    return r.output_text, details.cached_tokens if details else 0, r.usage.input_tokens


def anthropic_ask():
    import anthropic

    client = anthropic.Anthropic(base_url=url, api_key=token)
    messages = [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}},
        {"type": "text", "text": question},
    ]}]
    r = client.messages.create(model=model, messages=messages, max_tokens=8,
                               extra_body={"temperature": 0})
    first["prompt"] = r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0)
    if again:
        messages += [{"role": "assistant", "content": r.content[0].text},
                     {"role": "user", "content": follow_up}]
        r = client.messages.create(model=model, messages=messages, max_tokens=8,
                               extra_body={"temperature": 0})
    cached = r.usage.cache_read_input_tokens or 0
    return r.content[0].text, cached, r.usage.input_tokens + cached


def genai_ask():
    from google import genai
    from google.genai import types

    client = genai.Client(api_key=token, http_options=types.HttpOptions(base_url=url))
    config = types.GenerateContentConfig(temperature=0, max_output_tokens=8)
    contents = [types.Content(role="user", parts=[
        types.Part.from_bytes(data=raw, mime_type=mime),
        types.Part.from_text(text=question),
    ])]
    r = client.models.generate_content(model=model, contents=contents, config=config)
    first["prompt"] = r.usage_metadata.prompt_token_count
    if again:
        contents += [types.Content(role="model", parts=[types.Part.from_text(text=r.text)]),
                     types.Content(role="user", parts=[types.Part.from_text(text=follow_up)])]
        r = client.models.generate_content(model=model, contents=contents, config=config)
    u = r.usage_metadata
    return r.text, u.cached_content_token_count or 0, u.prompt_token_count


def ollama_ask():
    import ollama

    client = ollama.Client(host=url, headers={"Authorization": f"Bearer {token}"})
    options = {"temperature": 0, "num_predict": 8}
    messages = [{"role": "user", "content": question, "images": [data]}]
    r = client.chat(model=model, messages=messages, options=options)
    first["prompt"] = r.prompt_eval_count
    if again:
        messages += [{"role": "assistant", "content": r.message.content},
                     {"role": "user", "content": follow_up}]
        r = client.chat(model=model, messages=messages, options=options)
    # Ollama reports no cached tokens: the prompt's count is what it evaluated.
    return r.message.content, None, r.prompt_eval_count


def ollama_generate_ask():
    import ollama

    client = ollama.Client(host=url, headers={"Authorization": f"Bearer {token}"})
    options = {"temperature": 0, "num_predict": 8}
    r = client.generate(model=model, prompt=question, images=[data], options=options)
    return r.response, None, r.prompt_eval_count


text, cached, prompt = {"openai": openai_ask, "responses": responses_ask,
                        "anthropic": anthropic_ask, "genai": genai_ask, "ollama": ollama_ask,
                        "ollama_generate": ollama_generate_ask}[sdk]()
print(json.dumps({"text": text, "cached": cached, "prompt": prompt,
                  "first_prompt": first.get("prompt")}))
