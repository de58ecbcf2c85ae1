"""Drives the server's web page (/ui) in Chromium (Debian's package, through Playwright's
Python API; no browser is downloaded) for tests/e2e/ui.rs.

    python drive.py SCENARIO BASE_URL OPTIONS_JSON

SCENARIO is `provider` (a scripted provider behind a token: the token asked for and used, a
question answered with Markdown, reasoning, a tool call and structured output, a stream stopped
mid-way, another model picked, an error shown, conversations kept, renamed and deleted, the
engine view, a phone's width) or `embedded` (the embedded model: a question answered, the
engine view showing it loaded, then unloaded by its button) or `vision` (the embedded model
with a projector: images attached and answered). OPTIONS_JSON holds `token`, `screenshots` (a
folder, or null), `images` (files to attach). The page's own checks fail with an AssertionError; the last
line printed is a JSON report: every URL the browser requested, the texts the Rust test checks.
"""

import json
import os
import sys
from contextlib import contextmanager
from urllib.parse import urlsplit

from playwright.sync_api import expect, sync_playwright

CHROMIUM = os.environ.get("AGENT_AS_MODEL_CHROMIUM", "/usr/bin/chromium")
# Bounds on waits (a busy machine runs several browsers at once), not measurements.
WAIT = 60_000
expect.set_options(timeout=WAIT)


class Watch:
    """Every request the browser makes, the page's errors and security-policy refusals."""

    def __init__(self, context, page):
        self.requests = []
        self.errors = []
        context.on("request", lambda r: self.requests.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on(
            "console",
            lambda m: self.errors.append(f"console: {m.text}")
            if m.type == "error" and ("Content Security Policy" in m.text or "Refused to" in m.text)
            else None,
        )

    def check(self, base):
        origin = urlsplit(base)
        foreign = [
            u
            for u in self.requests
            if urlsplit(u).scheme not in ("data", "blob")
            and (urlsplit(u).scheme, urlsplit(u).netloc) != (origin.scheme, origin.netloc)
        ]
        assert not foreign, f"requests to another origin: {foreign}"
        assert not self.errors, f"the page reported errors: {self.errors}"


@contextmanager
def browsing(base, path, report):
    """A page of Chromium opened at `base` + `path`; when the scenario is done, every request
    the browser made is checked to have stayed on `base`'s origin and put in `report`."""
    with sync_playwright() as p:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.set_default_timeout(WAIT)
        watch = Watch(context, page)
        page.goto(f"{base}{path}")
        yield page
        watch.check(base)
        report["requests"] = watch.requests
        browser.close()


def last_answer(page):
    return page.locator("#messages .message.assistant").last


def ask(page, text):
    """Types `text` in the prompt and sends it with Enter (the keyboard alone)."""
    page.focus("#prompt")
    page.keyboard.type(text)
    page.keyboard.press("Enter")


def answered(page):
    """Waits until the answer in progress has ended (Send is back)."""
    expect(page.locator("#send")).to_be_visible()
    expect(page.locator("#stop")).to_be_hidden()


def tab_to(page, element_id, most=40):
    """Presses Tab from the top of the page until `element_id` has the focus."""
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(most):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement && document.activeElement.id") == element_id:
            return
    raise AssertionError(f"#{element_id} was not reached with Tab in {most} presses")


def token_asked(page, token):
    """The dialog asks for the token: a wrong one is refused, the right one taken."""
    dialog = page.locator("#auth")
    expect(dialog).to_be_visible()
    page.keyboard.type("not-the-token")
    page.keyboard.press("Enter")
    expect(page.locator("#auth-why")).to_contain_text("refused")
    page.keyboard.type(token)
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()


def chat_with_markdown(page, report):
    tab_to(page, "prompt")
    page.keyboard.type("What is the capital of France?")
    page.keyboard.press("Enter")
    answered(page)
    answer = last_answer(page)
    expect(answer.locator("strong")).to_have_text("Paris")
    expect(answer.locator("pre code")).to_contain_text("print('Paris')")
    expect(answer.locator("details.reasoning")).to_have_count(1)
    assert answer.locator("details.reasoning").get_attribute("open") is None, "reasoning unfolded"
    expect(answer.locator("details.reasoning")).to_contain_text("The user asks")
    # Model text is never HTML: the tags it wrote are text, no element of theirs exists.
    assert answer.locator("img, script, iframe").count() == 0, "model text became HTML"
    expect(answer).to_contain_text("<img src=x onerror=alert(1)>")
    assert answer.locator("a").get_attribute("href") == "https://example.org/paris"
    assert answer.locator("a").get_attribute("rel") == "noopener noreferrer nofollow"
    expect(answer.locator(".usage")).to_contain_text("12 prompt tokens")
    report["first_answer"] = answer.inner_text()


# The Markdown renderer on its own: what each text becomes (as the page's HTML reads it back).
MARKDOWN = {
    "[x](javascript:alert)": "<p>x</p>",
    "<script>alert(1)</script> <b>x</b>":
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;x&lt;/b&gt;</p>",
    "![cat](https://example.org/cat.png)":
        '<p><a href="https://example.org/cat.png" rel="noopener noreferrer nofollow" '
        'target="_blank">[image: cat]</a></p>',
    "```js\nlet x = '<b>'": '<div class="code"><span class="lang">js</span>'
                            "<pre><code>let x = '&lt;b&gt;'</code></pre></div>",
    "- a\n  - b\n- c": "<ul><li><p>a</p><ul><li><p>b</p></li></ul></li><li><p>c</p></li></ul>",
    "3. x\n4. y": '<ol start="3"><li><p>x</p></li><li><p>y</p></li></ol>',
    "| a | b |\n|---|:-:|\n| 1 | **2** |":
        '<div class="table-wrap"><table><thead><tr><th>a</th><th>b</th></tr></thead>'
        "<tbody><tr><td>1</td><td><strong>2</strong></td></tr></tbody></table></div>",
    "# T\n> q\n\n---\nuse `a<b>` and *c* _d_ snake_case ~~e~~":
        "<h3>T</h3><blockquote><p>q</p></blockquote><hr><p>use <code>a&lt;b&gt;</code> and "
        "<em>c</em> <em>d</em> snake_case <del>e</del></p>",
}


def markdown(page):
    rendered = page.evaluate(
        """async (texts) => {
            const { render } = await import("./ui/markdown.js");
            const box = document.createElement("div");
            return texts.map((text) => { box.replaceChildren(render(text)); return box.innerHTML; });
        }""",
        list(MARKDOWN),
    )
    for (text, expected), got in zip(MARKDOWN.items(), rendered):
        assert got == expected, f"Markdown {text!r} became {got!r}, not {expected!r}"


def stop_a_stream(page, report):
    ask(page, "Tell me a long story.")
    answer = last_answer(page)
    expect(answer.locator(".body")).to_contain_text("word 3")
    page.keyboard.press("Escape")
    expect(answer.locator(".stopped")).to_be_visible()
    answered(page)
    report["stopped_text"] = answer.locator(".body").inner_text()


def tools_and_structure(page, report):
    page.locator("#settings summary").click()
    page.fill("#tools", json.dumps([{"type": "function", "function": {
        "name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}}, "required": ["city"]}}}]))
    ask(page, "Weather in Paris?")
    answered(page)
    call = last_answer(page).locator(".tool-call")
    expect(call).to_contain_text("get_weather")
    expect(call.locator("pre")).to_contain_text('"city": "Paris"')
    page.fill("#tools", "")
    page.fill("#schema", json.dumps({"type": "object", "properties": {"city": {"type": "string"}},
                                     "required": ["city"]}))
    ask(page, "Which city? As JSON.")
    answered(page)
    shaped = last_answer(page).locator(".structured")
    expect(shaped).to_contain_text("Structured output")
    expect(shaped.locator("pre")).to_contain_text('"city": "Paris"')
    page.fill("#schema", "")
    page.locator("#settings summary").click()


def pick_a_model(page, report):
    options = page.locator("#model option").all_inner_texts()
    report["options"] = options
    page.select_option("#model", "fast")
    expect(page.locator("#capabilities")).to_contain_text("vision")
    ask(page, "Who are you?")
    answered(page)
    expect(last_answer(page)).to_contain_text("I am the second model.")
    expect(last_answer(page).locator(".who")).to_have_text("fast")
    page.select_option("#model", "scripted")


def an_error(page, report):
    ask(page, "This one fails.")
    answered(page)
    error = last_answer(page).locator(".error")
    expect(error).to_be_visible()
    report["error"] = error.inner_text()


def conversations(page, report):
    items = page.locator("#conversation-list li")
    expect(items).to_have_count(1)
    page.get_by_role("button", name="Rename").first.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("Paris questions")
    page.keyboard.press("Enter")
    expect(items.first.locator(".title")).to_have_text("Paris questions")
    page.click("#new-chat")
    expect(items).to_have_count(2)
    ask(page, "What is the capital of France?")
    answered(page)
    page.get_by_role("button", name="Delete What is the capital of France?").click()
    expect(items).to_have_count(1)
    # Kept in this browser: there after a reload, and the token is not asked again.
    page.reload()
    expect(items.first.locator(".title")).to_have_text("Paris questions")
    items.first.locator(".title").click()
    expect(page.locator("#messages .message")).to_have_count(12)
    page.wait_for_timeout(500)
    expect(page.locator("#auth")).to_be_hidden()


def engine_view(page, report):
    page.focus("#tab-chat")
    page.keyboard.press("ArrowRight")
    expect(page.locator("#engine")).to_be_visible()
    rows = page.locator("#models tbody tr")
    expect(page.locator('#models tr[data-model="scripted"]')).to_contain_text("provider")
    expect(page.locator('#models tr[data-model="second"]')).to_contain_text("fast")
    expect(page.locator("#queue")).to_contain_text("waiting")
    page.wait_for_function(
        "document.getElementById('chart-speed').dataset.latest !== ''"
        " && document.getElementById('chart-first').dataset.latest !== ''")
    report["engine_rows"] = rows.all_inner_texts()
    report["charts"] = page.evaluate(
        "['chart-speed', 'chart-first', 'chart-cached'].map(id => document.getElementById(id).dataset.latest)")


def phone(page, shots):
    page.set_viewport_size({"width": 390, "height": 844})
    for view in ("chat", "engine"):
        page.click(f"#tab-{view}")
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 1, f"the {view} view is {wide} px wider than a phone"
        if shots:
            page.screenshot(path=os.path.join(shots, f"ui-phone-{view}.png"))
    page.set_viewport_size({"width": 1280, "height": 800})
    page.click("#tab-chat")


def provider(base, options):
    report = {}
    with browsing(base, "/ui", report) as page:
        token_asked(page, options["token"])
        expect(page.locator("#model option")).to_have_count(4)
        chat_with_markdown(page, report)
        markdown(page)
        stop_a_stream(page, report)
        tools_and_structure(page, report)
        pick_a_model(page, report)
        an_error(page, report)
        conversations(page, report)
        shots = options.get("screenshots")
        if shots:
            page.locator("#messages .message").nth(2).scroll_into_view_if_needed()
            page.screenshot(path=os.path.join(shots, "ui-chat-provider.png"))
        engine_view(page, report)
        phone(page, shots)
    return report


def embedded(base, options):
    report = {}
    shots = options.get("screenshots")
    with browsing(base, "/ui#engine", report) as page:
        row = page.locator('#models tr[data-model="local"]')
        expect(row).to_have_attribute("data-state", "unloaded")
        page.click("#tab-chat")
        expect(page.locator("#capabilities")).to_contain_text("local")
        page.locator("#settings summary").click()
        page.fill("#max-tokens", "64")
        page.locator("#settings summary").click()
        ask(page, "What is the capital of France? Answer in one short sentence.")
        answered(page)
        answer = last_answer(page)
        expect(answer.locator(".error")).to_have_count(0)
        report["answer"] = answer.locator(".body").inner_text()
        # A second turn, whose answer is Markdown with code (for the screenshot).
        ask(page, "Write a one-line Python function that adds two numbers, in a code block.")
        answered(page)
        expect(last_answer(page).locator(".error")).to_have_count(0)
        if shots:
            page.screenshot(path=os.path.join(shots, "ui-chat.png"))
        page.click("#tab-engine")
        expect(row).to_have_attribute("data-state", "loaded")
        page.wait_for_function(
            "document.getElementById('chart-speed').dataset.latest !== ''")
        report["loaded_row"] = row.inner_text()
        if shots:
            page.screenshot(path=os.path.join(shots, "ui-engine.png"))
        page.focus('#models button[data-model="local"]')
        expect(page.locator('#models button[data-model="local"]')).to_have_text("Unload")
        page.keyboard.press("Enter")
        expect(row).to_have_attribute("data-state", "unloaded")
        report["unloaded_row"] = row.inner_text()
    return report


def vision(base, options):
    """The embedded model with a projector: the attach button is on, and an attached image
    reaches it (a red one, then in a new conversation a blue one)."""
    report = {"answers": []}
    with browsing(base, "/ui", report) as page:
        expect(page.locator("#capabilities")).to_contain_text("vision")
        expect(page.locator("#image")).to_be_enabled()
        for picture in options["images"]:
            page.click("#new-chat")
            page.set_input_files("#image", picture)
            expect(page.locator("#attached")).to_contain_text("image 1")
            ask(page, "What colour is this image? Answer with one word.")
            answered(page)
            answer = last_answer(page)
            expect(answer.locator(".error")).to_have_count(0)
            # The image is shown in the user's message, and gone from the next one's attachments.
            expect(page.locator("#messages .message.user").last.locator("img")).to_have_count(1)
            expect(page.locator("#attached")).not_to_contain_text("image 1")
            report["answers"].append(answer.locator(".body").inner_text())
    return report


def main():
    scenario, base, options = sys.argv[1], sys.argv[2].rstrip("/"), json.loads(sys.argv[3])
    scenarios = {"provider": provider, "embedded": embedded, "vision": vision}
    report = scenarios[scenario](base, options)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
