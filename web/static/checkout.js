// The hosted checkout page (DECISIONS.md section 12). No framework, no third-party
// code: it reads the public checkout document `GET /v1/checkout/{token}` and keeps the page in
// step with it, updating in place. Every text comes from strings.json (embedded in the page as
// a JSON data block), every value from the document is written with textContent, never HTML.
(function () {
  "use strict";

  // ---- strings and language ----------------------------------------------------------
  var ALL = JSON.parse(document.getElementById("ck-strings").textContent);
  var params = new URLSearchParams(location.search);

  function pickLanguage() {
    var wanted = [];
    if (params.get("lang")) wanted.push(params.get("lang"));
    // The server's pick from Accept-Language, then the browser's own list.
    if (document.documentElement.dataset.serverLang) {
      wanted.push(document.documentElement.dataset.serverLang);
    }
    (navigator.languages || [navigator.language || ""]).forEach(function (l) {
      wanted.push(l);
    });
    for (var i = 0; i < wanted.length; i++) {
      var l = String(wanted[i] || "").toLowerCase();
      if (ALL[l]) return l;
      var base = l.split("-")[0];
      if (ALL[base]) return base;
    }
    return "en";
  }

  var lang = pickLanguage();

  // `t("key", {name: value})`: the string in the page's language (English when missing).
  function t(key, vars) {
    var s = (ALL[lang] && ALL[lang][key]) || ALL.en[key] || key;
    return s.replace(/\{(\w+)\}/g, function (m, name) {
      return vars && vars[name] != null ? String(vars[name]) : m;
    });
  }

  // ---- DOM helpers -----------------------------------------------------------------
  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v == null || v === false) return;
        if (k === "text") e.textContent = v;
        else if (k === "class") e.className = v;
        else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? "" : v);
      });
    }
    (children || []).forEach(function (c) {
      if (c == null) return;
      e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function $(id) {
    return document.getElementById(id);
  }

  // Replaces the children of `node` when `key` (a JSON string of what it shows) changed, so
  // a poll that brings nothing new leaves focus, selection and typed text alone.
  function renderInto(node, key, build) {
    if (node.dataset.key === key) return;
    node.dataset.key = key;
    var keep = document.activeElement && node.contains(document.activeElement)
      ? document.activeElement.id : null;
    node.replaceChildren.apply(node, build().filter(function (c) { return c != null; }));
    if (keep && $(keep)) $(keep).focus();
  }

  function announce(msg) {
    var live = $("ck-announce");
    live.textContent = "";
    // A fresh text node after a tick so screen readers announce repeats too.
    setTimeout(function () { live.textContent = msg; }, 50);
  }

  function copy(text) {
    function fallback() {
      var ta = el("textarea", { "aria-hidden": "true", class: "ck-offscreen", readonly: true });
      ta.value = text;
      document.body.appendChild(ta);
      ta.select();
      var ok = false;
      try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
      ta.remove();
      announce(ok ? t("copied") : t("copy_failed"));
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { announce(t("copied")); }, fallback);
    } else {
      fallback();
    }
  }

  function safeUrl(u) {
    return typeof u === "string" && /^https?:\/\//i.test(u) ? u : null;
  }

  // ---- state ---------------------------------------------------------------------
  var token = decodeURIComponent(location.pathname.replace(/\/+$/, "").split("/").pop() || "");
  var apiUrl = "../v1/checkout/" + encodeURIComponent(token);
  var doc = null;
  var clockOffsetMs = 0; // server time minus local time
  var choice = null; // {chain, asset}
  var variant = "uri"; // what the QR codes carry: "uri" or "address"
  var lastStatus = null;
  var refundMessage = null;

  function optionKey(o) {
    return o.chain + "/" + o.asset;
  }

  function currentOption() {
    if (!doc || !doc.options || !doc.options.length) return null;
    var want = choice || doc.selected;
    var found = null;
    if (want) {
      doc.options.forEach(function (o) {
        if (o.chain === want.chain && o.asset === want.asset) found = o;
      });
    }
    return found || doc.options[0];
  }

  function networkName(chain) {
    var n = chain;
    (doc && doc.options || []).forEach(function (o) {
      if (o.chain === chain && o.name) n = o.name;
    });
    return n;
  }

  function merchantName() {
    return (doc && doc.merchant && doc.merchant.name) || "";
  }

  // ---- rendering -----------------------------------------------------------------
  function render() {
    document.documentElement.lang = lang;
    document.title = doc && doc.title ? doc.title + " · " + t("page_title") : t("page_title");
    $("ck-loading").hidden = true;
    $("ck-main").hidden = false;
    renderHeader();
    renderStatus();
    renderSummary();
    renderCountdown();
    renderOptions();
    renderRemainder();
    renderPayments();
    renderRefund();
    renderReturn();
  }

  function renderHeader() {
    var m = doc.merchant || {};
    var logo = safeUrl(m.logo_url);
    renderInto($("ck-header"), JSON.stringify([lang, m, doc.title, doc.description]), function () {
      return [
        logo ? el("img", { class: "ck-logo", src: logo, alt: t("merchant_logo", { merchant: m.name || "" }), referrerpolicy: "no-referrer" }) : null,
        el("div", null, [
          m.name ? el("p", { class: "ck-merchant", text: t("pay_to", { merchant: m.name }) }) : null,
          el("h1", { id: "ck-title", text: doc.title || t("page_title") }),
          doc.description ? el("p", { class: "ck-description", text: doc.description }) : null,
        ]),
      ];
    });
  }

  function statusText() {
    var v = { currency: doc.currency, remaining: doc.remaining, excess: doc.excess };
    switch (doc.status) {
      case "open": return [t("status_open"), null];
      case "pending": return [t("status_pending"), null];
      case "paid": return [t("status_paid"), null];
      case "underpaid": return [t("status_underpaid", v), t("status_underpaid_hint")];
      case "overpaid": return [t("status_overpaid", v), null];
      case "expired": return [t("status_expired"), t("status_expired_hint")];
      case "canceled": return [t("status_canceled"), null];
      default: return [t("status_unknown", { status: doc.status }), null];
    }
  }

  function renderStatus() {
    var s = statusText();
    var box = $("ck-status");
    box.dataset.status = doc.status;
    renderInto(box, JSON.stringify([lang, s]), function () {
      return [
        el("p", { class: "ck-status-main", text: s[0] }),
        s[1] ? el("p", { class: "ck-status-hint", text: s[1] }) : null,
      ];
    });
    lastStatus = doc.status;
  }

  function row(label, value, id) {
    return el("div", { class: "ck-row" }, [
      el("dt", { text: label }),
      el("dd", { id: id, text: value }),
    ]);
  }

  function renderSummary() {
    var c = doc.currency || "";
    var showRemaining = doc.status === "underpaid" || doc.status === "pending";
    var showExcess = doc.excess && Number(doc.excess) > 0;
    renderInto($("ck-summary"), JSON.stringify([lang, doc.price, doc.received, doc.remaining, doc.excess, doc.status]), function () {
      return [
        row(t("price"), doc.price + " " + c, "ck-price"),
        Number(doc.received) > 0 ? row(t("received"), doc.received + " " + c, "ck-received") : null,
        showRemaining && Number(doc.remaining) > 0 ? row(t("remaining"), doc.remaining + " " + c, "ck-remaining") : null,
        showExcess ? row(t("excess"), doc.excess + " " + c, "ck-excess") : null,
      ];
    });
  }

  function timeLeftMs() {
    return Date.parse(doc.expires_at) - (Date.now() + clockOffsetMs);
  }

  function formatDuration(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    function two(n) { return (n < 10 ? "0" : "") + n; }
    return (h > 0 ? h + ":" + two(m) : String(m)) + ":" + two(sec);
  }

  var countdownOn = false;
  function renderCountdown() {
    var box = $("ck-countdown");
    var show = doc.status === "open" || doc.status === "pending" || doc.status === "underpaid";
    box.hidden = !show;
    if (!show) return;
    renderInto(box, JSON.stringify([lang]), function () {
      return [
        el("p", { class: "ck-timer" }, [
          el("span", { class: "ck-timer-label", text: t("time_left") + " " }),
          // Not live: a screen reader is not read every second; the label says what it is.
          el("time", { id: "ck-timer", "aria-label": t("time_left") }),
        ]),
        el("p", { class: "ck-late", text: t("late_rule") }),
      ];
    });
    tickCountdown();
    if (!countdownOn) {
      countdownOn = true;
      setInterval(tickCountdown, 1000);
    }
  }

  function tickCountdown() {
    var node = $("ck-timer");
    if (!node || !doc) return;
    var left = timeLeftMs();
    node.textContent = formatDuration(left);
    node.setAttribute("datetime", doc.expires_at);
  }

  function qrUrl(o, which) {
    var q = new URLSearchParams({ chain: o.chain, asset: o.asset, variant: variant, amount: which });
    return encodeURIComponent(token) + "/qr.svg?" + q.toString();
  }

  function copyButton(label, value, id) {
    return el("button", { type: "button", class: "ck-copy", id: id, "aria-label": label, onclick: function () { copy(value); } }, [t("copy")]);
  }

  function field(label, value, copyLabel, id, unit) {
    return el("div", { class: "ck-field" }, [
      el("span", { class: "ck-field-label", id: id + "-label", text: label }),
      el("div", { class: "ck-field-value" }, [
        el("code", { id: id, "aria-labelledby": id + "-label", text: value }),
        unit ? el("span", { class: "ck-unit", text: unit }) : null,
        copyButton(copyLabel, value, id + "-copy"),
      ]),
    ]);
  }

  function qrBlock(o, which, uri, amount, idPrefix) {
    var alt = t("qr_alt", { amount: amount, asset: o.asset, network: o.name || o.chain });
    var content = variant === "uri" ? uri : o.address;
    return el("div", { class: "ck-qr-wrap" }, [
      el("button", { type: "button", class: "ck-qr", id: idPrefix + "-qr", "data-content": content, "aria-label": t("copy_uri") + ": " + alt, onclick: function () { copy(uri); } }, [
        el("img", { src: qrUrl(o, which), alt: alt, width: "240", height: "240" }),
      ]),
      el("p", { class: "ck-hint", text: t("qr_hint") }),
    ]);
  }

  // Payment details are offered while the invoice waits for money: not while a seen
  // payment confirms (a second one would overpay), and not once expired (the locked rates
  // are over; a late payment is still credited, as the status says).
  function payable() {
    return doc.status === "open";
  }

  function renderOptions() {
    var box = $("ck-options");
    var show = payable() && doc.options && doc.options.length > 0;
    box.hidden = !show;
    if (!show) { box.dataset.key = ""; box.replaceChildren(); return; }
    var o = currentOption();
    renderInto(box, JSON.stringify([lang, variant, optionKey(o), doc.options]), function () {
      var radios = doc.options.map(function (x, i) {
        var id = "ck-opt-" + i;
        return el("label", { class: "ck-choice", for: id }, [
          el("input", { type: "radio", name: "ck-option", id: id, value: optionKey(x), checked: optionKey(x) === optionKey(o), onchange: function () { choose(x); } }),
          el("span", { class: "ck-choice-asset", text: x.asset }),
          el("span", { class: "ck-choice-network", text: t("network_of", { network: x.name || x.chain }) }),
        ]);
      });
      return [
        el("fieldset", { class: "ck-choices" }, [el("legend", { text: t("choose_option") })].concat(radios)),
        variantSwitch("ck-variant"),
        el("section", { class: "ck-pay", id: "ck-pay", "aria-labelledby": "ck-pay-title", "data-chain": o.chain, "data-asset": o.asset }, [
          el("h2", { id: "ck-pay-title", text: o.asset + " " + t("network_of", { network: o.name || o.chain }) }),
          qrBlock(o, "full", o.uri, o.amount, "ck-full"),
          field(t("send_exactly"), o.amount, t("copy_amount"), "ck-amount", o.asset),
          field(t("to_address"), o.address, t("copy_address"), "ck-address"),
          o.memo ? field(t("memo"), o.memo, t("copy_memo"), "ck-memo") : null,
          el("p", { class: "ck-network" }, [el("strong", { text: t("network") + ": " }), o.name || o.chain]),
          o.stable ? null : el("p", { class: "ck-rate", text: t("rate", { asset: o.asset, rate: o.rate, currency: doc.currency }) }),
          el("p", { class: "ck-warning", text: t("address_warning", { asset: o.asset, network: o.name || o.chain }) }),
        ]),
      ];
    });
  }

  function variantSwitch(name) {
    function opt(value, label) {
      var id = name + "-" + value;
      return el("label", { class: "ck-choice", for: id }, [
        el("input", { type: "radio", name: name, id: id, value: value, checked: variant === value, onchange: function () { variant = value; render(); } }),
        el("span", { text: label }),
      ]);
    }
    return el("fieldset", { class: "ck-variant" }, [
      el("legend", { text: t("qr_variant") }),
      opt("uri", t("qr_variant_uri")),
      opt("address", t("qr_variant_address")),
    ]);
  }

  function renderRemainder() {
    var box = $("ck-remainder");
    var o = currentOption();
    var show = doc.status === "underpaid" && o && o.remaining_uri;
    box.hidden = !show;
    if (!show) { box.dataset.key = ""; box.replaceChildren(); return; }
    renderInto(box, JSON.stringify([lang, variant, optionKey(o), doc.options]), function () {
      var radios = doc.options.map(function (x, i) {
        var id = "ck-rem-opt-" + i;
        return el("label", { class: "ck-choice", for: id }, [
          el("input", { type: "radio", name: "ck-rem-option", id: id, value: optionKey(x), checked: optionKey(x) === optionKey(o), onchange: function () { choose(x); } }),
          el("span", { class: "ck-choice-asset", text: x.asset }),
          el("span", { class: "ck-choice-network", text: t("network_of", { network: x.name || x.chain }) }),
        ]);
      });
      return [
        el("h2", { id: "ck-remainder-title", text: t("remainder_title") }),
        el("fieldset", { class: "ck-choices" }, [el("legend", { text: t("choose_option") })].concat(radios)),
        variantSwitch("ck-rem-variant"),
        el("section", { class: "ck-pay", id: "ck-rem-pay", "data-chain": o.chain, "data-asset": o.asset }, [
          qrBlock(o, "remaining", o.remaining_uri, o.remaining_amount, "ck-rem"),
          field(t("send_exactly"), o.remaining_amount, t("copy_amount"), "ck-rem-amount", o.asset),
          field(t("to_address"), o.address, t("copy_address"), "ck-rem-address"),
          o.memo ? field(t("memo"), o.memo, t("copy_memo"), "ck-rem-memo") : null,
          el("p", { class: "ck-network" }, [el("strong", { text: t("network") + ": " }), o.name || o.chain]),
          el("p", { class: "ck-warning", text: t("address_warning", { asset: o.asset, network: o.name || o.chain }) }),
        ]),
      ];
    });
  }

  function paymentStatus(p) {
    if (p.status === "pending") {
      return t("payment_status_pending", { confirmations: p.confirmations, required: p.required_confirmations });
    }
    if (p.status === "confirmed") return t("payment_status_confirmed");
    return t("payment_status_other", { status: p.status });
  }

  function renderPayments() {
    var box = $("ck-payments");
    var list = doc.payments || [];
    box.hidden = list.length === 0;
    renderInto(box, JSON.stringify([lang, list]), function () {
      return [
        el("h2", { text: t("payments") }),
        el("ul", null, list.map(function (p) {
          var link = safeUrl(p.explorer_url);
          return el("li", null, [
            el("span", { class: "ck-payment-line", text: t("payment_line", { amount: p.amount, asset: p.asset, network: networkName(p.chain) }) }),
            " · ",
            el("span", { class: "ck-payment-status", text: paymentStatus(p) }),
            link ? " · " : null,
            link ? el("a", { href: link, rel: "noopener noreferrer", target: "_blank", text: t("view_tx") }) : null,
          ]);
        })),
      ];
    });
  }

  function renderRefund() {
    var box = $("ck-refund");
    var r = doc.refund;
    var show = doc.status === "overpaid" || !!r;
    box.hidden = !show;
    if (!show) { box.dataset.key = ""; box.replaceChildren(); return; }
    renderInto(box, JSON.stringify([lang, r, doc.overpayment_policy, refundMessage]), function () {
      var out = [el("h2", { id: "ck-refund-title", text: t("refund_title") })];
      if (doc.overpayment_policy !== "refund" && !r) {
        out.push(el("p", { text: t("keep_excess") }));
        return out;
      }
      if (!r) {
        out.push(el("p", { text: t("refund_preparing") }));
        return out;
      }
      var v = { net: r.net, fee: r.fee, gross: r.gross, asset: r.asset, network: networkName(r.chain), address: r.to_address };
      var link = safeUrl(r.explorer_url);
      switch (r.status) {
        case "awaiting_address":
          if (r.sender_class == null || r.net == null) {
            out.push(el("p", { text: t("refund_preparing") }));
            break;
          }
          out.push(el("p", { text: t("refund_intro", v) }));
          out.push(refundForm(r, v));
          break;
        case "pending":
          out.push(el("p", { id: "ck-refund-state", text: t("refund_pending", v) }));
          break;
        case "sent":
          out.push(el("p", { id: "ck-refund-state", text: t("refund_sent", v) }));
          break;
        case "confirmed":
          out.push(el("p", { id: "ck-refund-state", text: t("refund_confirmed", v) }));
          break;
        case "skipped":
          out.push(el("p", { id: "ck-refund-state", text: r.skip_reason === "dust" ? t("refund_skipped_dust") : r.skip_reason === "policy_keep" ? t("refund_skipped_policy_keep") : t("refund_skipped", { reason: r.skip_reason }) }));
          break;
        default:
          out.push(el("p", { id: "ck-refund-state", text: t("status_unknown", { status: r.status }) }));
      }
      if (link && r.tx_hash) {
        out.push(el("p", null, [el("a", { href: link, rel: "noopener noreferrer", target: "_blank", text: t("view_tx") })]));
      }
      return out;
    });
  }

  function refundForm(r, v) {
    var input = el("input", {
      id: "ck-refund-address", name: "address", type: "text", required: true,
      autocomplete: "off", autocapitalize: "off", spellcheck: "false", maxlength: "128",
      "aria-describedby": r.sender_class === "personal" && r.suggested_address ? "ck-refund-suggested" : null,
    });
    if (r.sender_class === "personal" && r.suggested_address) input.value = r.suggested_address;
    var button = el("button", { type: "submit", id: "ck-refund-submit", text: t("refund_submit") });
    var form = el("form", { id: "ck-refund-form", novalidate: true, onsubmit: function (e) {
      e.preventDefault();
      var address = input.value.trim();
      if (!address) { input.focus(); return; }
      button.disabled = true;
      button.textContent = t("refund_sending");
      fetch(apiUrl + "/refund", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ address: address }),
        credentials: "omit",
        cache: "no-store",
      }).then(function (res) {
        return res.json().then(function (body) { return { ok: res.ok, body: body }; });
      }).then(function (x) {
        if (x.ok) {
          refundMessage = null;
          accept(x.body, null);
        } else {
          refundMessage = t("refund_error", { message: (x.body && x.body.message) || "" });
          box().dataset.key = "";
          render();
          announce(refundMessage);
        }
      }).catch(function () {
        refundMessage = t("load_failed");
        box().dataset.key = "";
        render();
      });
    } }, [
      el("label", { for: "ck-refund-address", text: t("refund_address", v) }),
      input,
      r.sender_class === "personal" && r.suggested_address ? el("p", { id: "ck-refund-suggested", class: "ck-hint", text: t("refund_suggested") }) : null,
      refundMessage ? el("p", { class: "ck-error", role: "alert", text: refundMessage }) : null,
      button,
    ]);
    function box() { return $("ck-refund"); }
    return form;
  }

  function renderReturn() {
    var box = $("ck-return");
    var url = safeUrl(doc.return_url);
    var show = !!url && (doc.status === "paid" || doc.status === "overpaid" || doc.status === "expired" || doc.status === "canceled");
    box.hidden = !show;
    renderInto(box, JSON.stringify([lang, url, show]), function () {
      return show ? [el("a", { href: url, class: "ck-return-link", text: t("return", { merchant: merchantName() || url }) })] : [];
    });
  }

  function renderLanguages() {
    var sel = $("ck-lang");
    $("ck-lang-label").textContent = t("language");
    sel.replaceChildren.apply(sel, Object.keys(ALL).map(function (code) {
      return el("option", { value: code, selected: code === lang, text: ALL[code].lang_name });
    }));
  }

  // ---- actions -------------------------------------------------------------------
  function choose(o) {
    choice = { chain: o.chain, asset: o.asset };
    render();
    var radio = document.querySelector("input[value='" + optionKey(o) + "']");
    if (radio) radio.focus();
    // A display preference only (SPEC.md section 4, Checkout): it locks nothing.
    fetch(apiUrl + "/select", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(choice),
      credentials: "omit",
      cache: "no-store",
    }).catch(function () {});
  }

  function accept(body, res) {
    var first = doc === null;
    var before = lastStatus;
    doc = body;
    if (doc.now) clockOffsetMs = Date.parse(doc.now) - Date.now();
    else if (res && res.headers.get("Date")) clockOffsetMs = Date.parse(res.headers.get("Date")) - Date.now();
    render();
    if (!first && before !== doc.status) announce(statusText()[0]);
  }

  function notFound() {
    stopPolling();
    $("ck-loading").hidden = true;
    $("ck-main").hidden = true;
    var nf = $("ck-not-found");
    nf.hidden = false;
    nf.replaceChildren(
      el("h1", { text: t("not_found_title") }),
      el("p", { text: t("not_found_body") })
    );
    document.title = t("not_found_title");
  }

  // ---- polling: SPEC.md section 8 (3 s for two minutes, then 8 s, then 20 s) ----------
  var startedAt = Date.now();
  var timer = null;
  var inFlight = false;

  function nextDelayMs() {
    var elapsed = Date.now() - startedAt;
    if (elapsed < 2 * 60 * 1000) return 3000;
    if (elapsed < 10 * 60 * 1000) return 8000;
    return 20000;
  }

  function schedule() {
    stopPolling();
    if (document.hidden) return;
    timer = setTimeout(poll, nextDelayMs());
  }

  function stopPolling() {
    if (timer) clearTimeout(timer);
    timer = null;
  }

  function poll() {
    if (inFlight) return;
    inFlight = true;
    fetch(apiUrl, { credentials: "omit", cache: "no-store", headers: { Accept: "application/json" } })
      .then(function (res) {
        if (res.status === 404) { notFound(); return null; }
        if (!res.ok) throw new Error("status " + res.status);
        return res.json().then(function (body) { accept(body, res); return true; });
      })
      .catch(function () {
        if (!doc) $("ck-loading").textContent = t("load_failed");
        return true;
      })
      .then(function (again) {
        inFlight = false;
        if (again) schedule();
      });
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) stopPolling();
    else if (!inFlight && $("ck-not-found").hidden) poll();
  });

  $("ck-lang").addEventListener("change", function (e) {
    lang = e.target.value;
    renderLanguages();
    if (doc) render();
  });

  $("ck-loading").textContent = t("loading");
  renderLanguages();
  if (!/^ck_[A-Za-z0-9_-]{43}$/.test(token)) notFound();
  else poll();
})();
