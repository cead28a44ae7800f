"""The page `aayn serve` shows at `/`: pick a pair, type or paste text, see the translation, its alternatives and
any error, through the server's own LibreTranslate API (`/languages`, `/frontend/settings`, `/translate`). One
HTML document with its style and script inline: no build step and nothing fetched from elsewhere."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>aayn translate</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; background: #f4f5f7; color: #1d2430; }
  header { background: #1d2430; color: #fff; padding: 0.8rem 1.5rem; font-size: 1.2rem; }
  header small { color: #aab4c3; font-size: 0.85rem; margin-left: 0.6rem; }
  main { max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; }
  .controls { display: flex; gap: 0.8rem; align-items: center; flex-wrap: wrap; margin-bottom: 0.8rem; }
  select, input, button { font: inherit; padding: 0.35rem 0.5rem; }
  button { background: #2f6fde; color: #fff; border: 0; border-radius: 4px; padding: 0.45rem 1.2rem; }
  button:disabled { background: #8aa6d6; }
  .panes { display: grid; grid-template-columns: 1fr 1fr; gap: 1rem; }
  textarea, #output { width: 100%; box-sizing: border-box; min-height: 12rem; font: inherit; padding: 0.6rem;
                      border: 1px solid #c9ced6; border-radius: 4px; background: #fff; white-space: pre-wrap; }
  #alternatives { margin-top: 0.6rem; color: #4a5568; }
  #alternatives li { margin: 0.2rem 0; }
  #error { margin-top: 0.8rem; color: #a61b1b; background: #fde8e8; padding: 0.5rem 0.7rem; border-radius: 4px; }
  #count { color: #6b7480; font-size: 0.85rem; }
</style>
</head>
<body>
<header>aayn translate<small>the Transformer of "Attention Is All You Need", served by aayn serve</small></header>
<main>
  <div class="controls">
    <label>Pair <select id="pair"></select></label>
    <label>Alternatives <select id="alternatives-count">
      <option>0</option><option>1</option><option>2</option><option>3</option></select></label>
    <label id="key-label" hidden>API key <input id="api-key" type="password" size="16"></label>
    <button id="translate">Translate</button>
    <span id="count"></span>
  </div>
  <div class="panes">
    <textarea id="source" placeholder="Type or paste text here"></textarea>
    <div id="output" aria-live="polite"></div>
  </div>
  <ul id="alternatives"></ul>
  <section id="files" hidden>
    <h2>Files</h2>
    <input id="file" type="file"> <button id="translate-file">Translate file</button>
    <a id="download" hidden>Download the translation</a>
  </section>
  <div id="error" hidden></div>
</main>
<script>
const $ = (id) => document.getElementById(id);
let charLimit = -1;

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = !message;
}

async function answer(response) {
  let body = null;
  try { body = await response.json(); } catch (e) { body = null; }
  if (!response.ok) {
    throw new Error((body && body.error) || `the server answered ${response.status}`);
  }
  return body;
}

const SECRET = "__SECRET__";  // where the server asks keyless requests for its page's secret

async function load() {
  try {
    const settings = await answer(await fetch("frontend/settings"));
    charLimit = settings.charLimit;
    $("files").hidden = !settings.filesTranslation;
    $("file").accept = (settings.supportedFilesFormat || []).join(",");
    $("key-label").hidden = !settings.apiKeys;
    const languages = await answer(await fetch("languages"));
    for (const source of languages) {
      for (const target of source.targets) {
        const option = new Option(`${source.name} (${source.code}) → ${target}`, `${source.code}:${target}`);
        $("pair").add(option);
      }
    }
    if (!$("pair").options.length) { showError("This server serves no language pair."); }
  } catch (error) {
    showError(error.message);
  }
  countCharacters();
}

function countCharacters() {
  const length = $("source").value.length;
  $("count").textContent = charLimit > 0 ? `${length} / ${charLimit} characters` : `${length} characters`;
}

async function translate() {
  const [source, target] = $("pair").value.split(":");
  const request = { q: $("source").value, source, target, format: "text",
                    alternatives: Number($("alternatives-count").value) };
  if (!$("key-label").hidden) { request.api_key = $("api-key").value; }
  if (SECRET) { request.secret = SECRET; }
  $("translate").disabled = true;
  showError("");
  try {
    const result = await answer(await fetch("translate", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request) }));
    $("output").textContent = result.translatedText;
    $("alternatives").replaceChildren(...(result.alternatives || []).map((text) => {
      const item = document.createElement("li");
      item.textContent = text;
      return item;
    }));
  } catch (error) {
    $("output").textContent = "";
    $("alternatives").replaceChildren();
    showError(error.message);
  } finally {
    $("translate").disabled = false;
  }
}

async function translateFile() {
  const [source, target] = $("pair").value.split(":");
  if (!$("file").files.length) { showError("Choose a file first."); return; }
  const form = new FormData();  // as LibreTranslate's page sends it
  form.append("file", $("file").files[0]);
  form.append("source", source);
  form.append("target", target);
  if (!$("key-label").hidden) { form.append("api_key", $("api-key").value); }
  if (SECRET) { form.append("secret", SECRET); }
  $("translate-file").disabled = true;
  $("download").hidden = true;
  showError("");
  try {
    const result = await answer(await fetch("translate_file", { method: "POST", body: form }));
    $("download").href = result.translatedFileUrl;
    $("download").hidden = false;
  } catch (error) {
    showError(error.message);
  } finally {
    $("translate-file").disabled = false;
  }
}

$("translate").addEventListener("click", translate);
$("translate-file").addEventListener("click", translateFile);
$("source").addEventListener("input", countCharacters);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { translate(); }
});
load();
</script>
</body>
</html>
"""
