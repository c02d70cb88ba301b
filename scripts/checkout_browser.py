#!/usr/bin/env python3
"""The hosted checkout page in a real browser, against a real test-mode server.

Starts `target/debug/appliance --test` on a free loopback port with a fresh data dir, sets the
merchant's name, creates invoices with the checkout key and drives Debian's
`chromium-headless-shell` through Playwright for Python (`executable_path`; Playwright's own
browser download is not used). Checks, at 390x844 unless said otherwise:

- the QR code, decoded from a screenshot (zxing-cpp), is exactly `options[].uri`, and with the
  variant switch exactly the address; the address and amount copy buttons copy them;
- paying through `POST /v1/test/transfers` turns the page `paid` without a reload;
- underpaid (the remainder's own QR decodes to `remaining_uri`), expired (test clock), and the
  refund form (suggested address prefilled for a personal sender, sent, then pending);
- polling every 3 s, paused while the page is hidden; the status region is `aria-live`;
- `?lang=de` and the browser's language; the same "not found" page for a malformed and an
  unknown token; no page error and no Content-Security-Policy violation; no cookie;
- 360 px wide without horizontal scrolling, light and dark schemes;
- axe-core (npm, pinned) injected into every state: no serious or critical violation.

Screenshots are kept in target/checkout-screenshots/. Prints `N passed, N failed`; exits non-zero
on any failure.
"""

import io
import json
import os
import re
import shutil
import sys
import time
import traceback

from harness import ROOT, Launched, cli, request
SHOTS = os.path.join(ROOT, "target", "checkout-screenshots")
AXE = os.path.join(ROOT, "node_modules", "axe-core", "axe.min.js")
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PHONE = {"width": 390, "height": 844}


class Api:
    def __init__(self, base):
        self.base = base

    def call(self, method, path, token=None, body=None, headers=None):
        return request(self.base, method, path, token, body, headers)

    def json(self, method, path, token=None, body=None, ok=(200, 201, 202)):
        status, raw = self.call(method, path, token, body)
        if status not in ok:
            raise AssertionError(f"{method} {path}: {status} {raw[:500]!r}")
        return json.loads(raw)


def decode_qr(png_bytes):
    import zxingcpp
    from PIL import Image

    img = Image.open(io.BytesIO(png_bytes)).convert("L")
    found = zxingcpp.read_barcodes(img)
    texts = [b.text for b in found if b.format == zxingcpp.BarcodeFormat.QRCode]
    if len(texts) != 1:
        raise AssertionError(f"expected one QR code in the screenshot, decoded {texts!r}")
    return texts[0]


class Run:
    def __init__(self, api, keys, base):
        self.api = api
        self.keys = keys
        self.base = base
        self.passed = 0
        self.failed = 0
        self.failures = []

    def check(self, name, fn):
        try:
            fn()
            self.passed += 1
            print(f"ok   {name}", flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported, the run goes on
            self.failed += 1
            self.failures.append(name)
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)

    # --- server-side helpers ---------------------------------------------------------
    def invoice(self, price_cents="4000", **extra):
        body = {"price_amount": price_cents, "title": "Order 1042", "description": "Two notebooks",
                "return_url": "https://shop.example/thanks", "accepted_chains": ["ethereum", "polygon"]}
        body.update(extra)
        inv = self.api.json("POST", "/v1/invoices", self.keys["checkout"], body)
        token = inv["checkout_url"].rstrip("/").split("/")[-1]
        assert re.fullmatch(r"ck_[A-Za-z0-9_-]{43}", token), inv["checkout_url"]
        return inv, token

    def doc(self, token):
        return self.api.json("GET", f"/v1/checkout/{token}")

    def transfer(self, option, amount_atomic, **extra):
        body = {"chain": option["chain"], "asset": option["asset"], "decimals": option["decimals"],
                "amount": str(amount_atomic), "to_address": option["address"]}
        body.update(extra)
        return self.api.json("POST", "/v1/test/transfers", self.keys["wallet"], body)


def axe_check(page, label):
    result = page.evaluate("async () => JSON.stringify(await axe.run(document, {resultTypes: ['violations']}))")
    violations = json.loads(result)["violations"]
    bad = [v for v in violations if v.get("impact") in ("serious", "critical")]
    if bad:
        raise AssertionError(f"axe ({label}): " + "; ".join(
            f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}" for v in bad))


def wait_js(page, expression, timeout_ms=10000):
    """Waits until `expression` (a function source, evaluated through the DevTools protocol,
    not `eval`: the page's CSP forbids that) returns a truthy value."""
    deadline = time.time() + timeout_ms / 1000
    while True:
        if page.evaluate(expression):
            return
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {expression}")
        page.wait_for_timeout(100)


def shot(page, name, **kw):
    page.screenshot(path=os.path.join(SHOTS, name + ".png"), full_page=True, **kw)


def main():
    try:
        from playwright.sync_api import sync_playwright
        import zxingcpp  # noqa: F401
        from PIL import Image  # noqa: F401
    except ImportError as e:
        sys.exit(f"{e}: run scripts/install-test-deps.sh")
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"{CHROMIUM} missing: run scripts/install-test-deps.sh (chromium-headless-shell)")
    if not os.path.exists(AXE):
        sys.exit(f"{AXE} missing: run scripts/install-test-deps.sh (npm ci)")
    axe_source = open(AXE).read()

    shutil.rmtree(SHOTS, ignore_errors=True)
    os.makedirs(SHOTS)
    server = Launched("appliance-checkout-browser-")
    data_dir, base = server.data_dir, server.base
    ok = False
    try:
        keys = server.printed_keys()
        cli(data_dir, "project", "set", "default", "--merchant-name", "Northwind Books")
        api = Api(base)
        run = Run(api, keys, base)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            try:
                scenarios(run, browser, axe_source)
            finally:
                browser.close()
        print(f"{run.passed} passed, {run.failed} failed")
        if run.failures:
            print("failed: " + ", ".join(run.failures))
        print(f"screenshots: {SHOTS}")
        ok = run.failed == 0
    finally:
        server.stop(keep=not ok)
    sys.exit(0 if ok else 1)


def new_page(browser, axe_source, errors, **ctx):
    opts = {"viewport": PHONE, "locale": "en-US", "color_scheme": "light"}
    opts.update(ctx)
    context = browser.new_context(**opts)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    # Injected through the DevTools protocol, so the page's own CSP stays in force.
    context.add_init_script(script=axe_source)
    page = context.new_page()
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}")
            if m.type == "error" and "404" not in m.text else None)
    return context, page


def wait_status(page, status, timeout_ms=20000):
    page.wait_for_selector(f"#ck-status[data-status='{status}']", timeout=timeout_ms)


def scenarios(run, browser, axe_source):
    errors = []

    # ---- open: QR, variant switch, copy buttons, polling, accessibility -------------------
    inv, token = run.invoice()
    doc = run.doc(token)
    context, page = new_page(browser, axe_source, errors)
    url = f"{run.base}/checkout/{token}"
    polls = []
    page.on("request", lambda r: polls.append(time.time()) if r.method == "GET" and r.url.endswith(f"/v1/checkout/{token}") else None)
    resp = page.goto(url)

    def served_strictly():
        assert resp.status == 200, resp.status
        h = resp.headers
        assert h["content-security-policy"].startswith("default-src 'self'"), h
        assert "set-cookie" not in h, h
        assert h.get("referrer-policy") == "no-referrer", h
        assert h["content-type"].startswith("text/html"), h
    run.check("page served with a strict CSP, no cookie", served_strictly)

    page.wait_for_selector("#ck-pay", timeout=20000)
    shot(page, "01-open")

    def shows_document():
        wait_status(page, "open")
        assert page.inner_text("#ck-title") == "Order 1042"
        assert "Northwind Books" in page.inner_text("#ck-header")
        assert page.inner_text("#ck-price") == f"{doc['price']} {doc['currency']}"
        assert page.get_attribute("#ck-status", "aria-live") == "polite"
        timer = page.inner_text("#ck-timer")
        assert re.fullmatch(r"\d+:\d\d(:\d\d)?", timer), timer
        assert "still received" in page.inner_text("#ck-countdown")
        n = page.locator("input[name='ck-option']").count()
        assert n == len(doc["options"]) and n >= 2, (n, doc["options"])
    run.check("open invoice: title, merchant, price, countdown, one option per (chain, asset)", shows_document)

    def option_on_page():
        chain = page.get_attribute("#ck-pay", "data-chain")
        asset = page.get_attribute("#ck-pay", "data-asset")
        return next(o for o in run.doc(token)["options"] if o["chain"] == chain and o["asset"] == asset)

    def qr_is_uri():
        o = option_on_page()
        text = decode_qr(page.locator("#ck-full-qr img").screenshot())
        assert text == o["uri"], (text, o["uri"])
        assert page.inner_text("#ck-address") == o["address"]
        assert page.inner_text("#ck-amount") == o["amount"]
        assert o["name"] in page.inner_text("#ck-pay")
    run.check("QR decoded from a screenshot is exactly options[].uri", qr_is_uri)

    def variant_address():
        page.check("#ck-variant-address")
        wait_js(page, "() => document.querySelector('#ck-full-qr img').src.includes('variant=address')")
        wait_js(page, "() => document.querySelector('#ck-full-qr img').complete")
        o = option_on_page()
        text = decode_qr(page.locator("#ck-full-qr img").screenshot())
        assert text == o["address"], (text, o["address"])
        page.check("#ck-variant-uri")
        wait_js(page, "() => document.querySelector('#ck-full-qr img').src.includes('variant=uri')")
    run.check("QR variant switch: address only", variant_address)

    def other_option():
        second = page.locator("input[name='ck-option']").nth(1)
        second.check()
        o = option_on_page()
        wait_js(page, "() => document.querySelector('#ck-full-qr img').complete")
        text = decode_qr(page.locator("#ck-full-qr img").screenshot())
        assert text == o["uri"], (text, o["uri"])
        # The choice is stored as the display preference (POST .../select).
        deadline = time.time() + 5
        while time.time() < deadline and run.doc(token).get("selected") != {"chain": o["chain"], "asset": o["asset"]}:
            time.sleep(0.2)
        assert run.doc(token)["selected"] == {"chain": o["chain"], "asset": o["asset"]}
        page.locator("input[name='ck-option']").nth(0).check()
    run.check("choosing another option redraws its QR and records the selection", other_option)

    def copy_buttons_by_keyboard():
        o = option_on_page()
        page.focus("#ck-address-copy")
        page.keyboard.press("Enter")
        wait_js(page, "() => document.getElementById('ck-announce').textContent.length > 0")
        assert page.evaluate("navigator.clipboard.readText()") == o["address"]
        assert "Copied" in page.inner_text("#ck-announce")
        page.focus("#ck-amount-copy")
        page.keyboard.press("Space")
        wait_js(page, f"() => navigator.clipboard.readText().then(t => t === {json.dumps(o['amount'])})")
        page.click("#ck-full-qr")
        wait_js(page, f"() => navigator.clipboard.readText().then(t => t === {json.dumps(o['uri'])})")
    run.check("copy buttons (keyboard) and a click on the QR copy address, amount and URI", copy_buttons_by_keyboard)

    run.check("axe-core: open invoice", lambda: axe_check(page, "open"))

    def polls_on_schedule():
        polls.clear()
        page.wait_for_timeout(7500)
        assert 2 <= len(polls) <= 4, f"{len(polls)} polls in 7.5 s"
        page.evaluate("""() => {
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});
            Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'hidden'});
            document.dispatchEvent(new Event('visibilitychange'));
        }""")
        polls.clear()
        page.wait_for_timeout(7000)
        assert len(polls) == 0, f"{len(polls)} polls while hidden"
        page.evaluate("""() => {
            Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});
            Object.defineProperty(document, 'visibilityState', {configurable: true, get: () => 'visible'});
            document.dispatchEvent(new Event('visibilitychange'));
        }""")
        page.wait_for_timeout(1000)
        assert len(polls) >= 1, "no poll after the page became visible again"
    run.check("polls every 3 s, pauses while hidden, resumes when visible", polls_on_schedule)

    def paid_without_reload():
        page.evaluate("window.__sameDocument = true")
        o = option_on_page()
        run.transfer(o, o["amount_atomic"], confirm=True)
        wait_status(page, "paid", 20000)
        assert page.evaluate("window.__sameDocument === true"), "the page reloaded"
        assert "Paid" in page.inner_text("#ck-status")
        page.wait_for_selector("#ck-payments li")
        link = page.locator(".ck-return-link")
        assert link.get_attribute("href") == "https://shop.example/thanks"
        shot(page, "02-paid")
        axe_check(page, "paid")
    run.check("paid through POST /v1/test/transfers: the page turns paid without a reload", paid_without_reload)
    context.close()

    # ---- underpaid: the remainder with its own QR -----------------------------------------
    def underpaid():
        inv, token = run.invoice("5000")
        doc = run.doc(token)
        o = doc["options"][0]
        context, page = new_page(browser, axe_source, errors)
        page.goto(f"{run.base}/checkout/{token}")
        page.wait_for_selector("#ck-pay")
        run.transfer(o, int(o["amount_atomic"]) // 2, confirm=True)
        wait_status(page, "underpaid")
        page.wait_for_selector("#ck-rem-pay")
        cur = next(x for x in run.doc(token)["options"]
                   if x["chain"] == page.get_attribute("#ck-rem-pay", "data-chain")
                   and x["asset"] == page.get_attribute("#ck-rem-pay", "data-asset"))
        assert cur["remaining_uri"] and cur["remaining_uri"] != cur["uri"]
        wait_js(page, "() => document.querySelector('#ck-rem-qr img').complete")
        text = decode_qr(page.locator("#ck-rem-qr img").screenshot())
        assert text == cur["remaining_uri"], (text, cur["remaining_uri"])
        assert page.inner_text("#ck-rem-amount") == cur["remaining_amount"]
        assert page.locator("#ck-remaining").count() == 1
        shot(page, "03-underpaid")
        axe_check(page, "underpaid")
        context.close()
    run.check("underpaid: remaining amount and the remainder's own QR", underpaid)

    # ---- expired (test clock) -------------------------------------------------------------
    def expired():
        inv, token = run.invoice("1500")
        context, page = new_page(browser, axe_source, errors)
        page.goto(f"{run.base}/checkout/{token}")
        page.wait_for_selector("#ck-pay")
        run.api.json("POST", "/v1/test/clock", run.keys["wallet"], {"advance_seconds": 7200})
        wait_status(page, "expired", 30000)
        assert "still received" in page.inner_text("#ck-status")
        shot(page, "04-expired")
        axe_check(page, "expired")
        context.close()
    run.check("expired through the test clock, with the late-payment rule", expired)

    # ---- overpaid with the refund policy: the refund form ----------------------------------
    def refund_form():
        inv, token = run.invoice("2000", overpayment_policy="refund", accepted_chains=["ethereum"],
                                 accepted_assets=["USDT"])
        doc = run.doc(token)
        o = doc["options"][0]
        sender = "0x1111111111111111111111111111111111111111"
        context, page = new_page(browser, axe_source, errors)
        page.goto(f"{run.base}/checkout/{token}")
        page.wait_for_selector("#ck-pay")
        run.transfer(o, int(o["amount_atomic"]) * 3, confirm=True, from_address=sender, sender_class="personal")
        wait_status(page, "overpaid")
        page.wait_for_selector("#ck-refund-form", timeout=20000)
        field = page.locator("#ck-refund-address")
        assert field.input_value().lower() == sender, field.input_value()
        assert page.locator("label[for='ck-refund-address']").count() == 1
        shot(page, "05-refund-form")
        axe_check(page, "refund form")
        page.click("#ck-refund-submit")
        page.wait_for_selector("#ck-refund-state", timeout=20000)
        r = run.doc(token)["refund"]
        assert r["status"] in ("pending", "sent", "confirmed"), r
        assert r["to_address"].lower() == sender
        shot(page, "06-refund-sent")
        context.close()
    run.check("overpaid with the refund policy: prefilled form, refund sent", refund_form)

    # ---- languages, not found, 360 px, dark --------------------------------------------------
    inv, token = run.invoice("990")

    def german():
        context, page = new_page(browser, axe_source, errors)
        page.goto(f"{run.base}/checkout/{token}?lang=de")
        page.wait_for_selector("#ck-pay")
        assert page.evaluate("document.documentElement.lang") == "de"
        assert "Warten auf Ihre Zahlung" in page.inner_text("#ck-status")
        context.close()
        context, page = new_page(browser, axe_source, errors, locale="fr-FR")
        page.goto(f"{run.base}/checkout/{token}")
        page.wait_for_selector("#ck-pay")
        assert page.evaluate("document.documentElement.lang") == "fr"
        assert "En attente de votre paiement" in page.inner_text("#ck-status")
        shot(page, "07-french")
        context.close()
    run.check("?lang=de and the browser's language (fr)", german)

    def not_found():
        context, page = new_page(browser, axe_source, errors)
        bodies = []
        for bad in ("ck_short", "ck_" + "A" * 43, "nonsense%3Cscript%3E"):
            r = page.goto(f"{run.base}/checkout/{bad}")
            assert r.status == 404, (bad, r.status)
            assert "not found" in page.inner_text("body").lower()
            bodies.append(r.text())
        assert bodies[0] == bodies[1] == bodies[2], "the not-found pages differ"
        shot(page, "08-not-found")
        axe_check(page, "not found")
        context.close()
    run.check("malformed and unknown tokens: the same not-found page", not_found)

    def narrow_and_dark():
        for scheme in ("light", "dark"):
            context, page = new_page(browser, axe_source, errors, viewport={"width": 360, "height": 740},
                                     color_scheme=scheme)
            page.goto(f"{run.base}/checkout/{token}")
            page.wait_for_selector("#ck-pay")
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 360, f"{scheme}: scroll width {width} at 360 px"
            bg = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert (bg == "rgb(17, 19, 23)") == (scheme == "dark"), (scheme, bg)
            shot(page, f"09-360px-{scheme}")
            axe_check(page, f"360 px {scheme}")
            assert page.context.cookies() == [], "the page set a cookie"
            context.close()
    run.check("360 px wide in light and dark schemes, no cookie", narrow_and_dark)

    def no_errors():
        assert not errors, "\n".join(errors)
    run.check("no page error or CSP violation in any run", no_errors)


if __name__ == "__main__":
    main()
