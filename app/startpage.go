package app

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"time"
)

// startPageHint is how long the start page waits for the guardian before it says that
// something may be wrong (it keeps trying all the same).
const startPageHint = 10 * time.Second

// The start page is the only page Wails' asset server serves. It probes the console URL
// and then replaces itself with it, so the console runs from the guardian's own origin,
// where its /api calls and the /api/live websocket work as they do in a browser. When a
// load of the console fails later (the guardian restarts), the window comes back here
// with ?next=<the address that failed> and returns to it once the guardian answers.
var startPageTemplate = template.Must(template.New("start").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
  :root { color-scheme: light dark; font-family: system-ui, sans-serif; }
  body { margin: 0; min-height: 100vh; display: grid; place-items: center;
         background: #0f172a; color: #e2e8f0; }
  main { text-align: center; max-width: 36rem; padding: 2rem; }
  svg { width: 96px; height: 96px; }
  h1 { font-size: 1.5rem; margin: 1rem 0 .5rem; font-weight: 600; }
  p { margin: .25rem 0; color: #94a3b8; }
  a { color: #5eead4; }
</style>
</head>
<body>
<main>
  <svg viewBox="0 0 100 100" aria-hidden="true">
    <path d="M50 6 L88 18 V46 C88 70 72 86 50 95 C28 86 12 70 12 46 V18 Z" fill="#0d9488"/>
    <path d="M24 50 Q50 24 76 50 Q50 76 24 50 Z" fill="#f8fafc"/>
    <circle cx="50" cy="50" r="11" fill="#0f172a"/>
    <circle cx="54" cy="46" r="3.5" fill="#f8fafc"/>
  </svg>
  <h1>{{.Title}}</h1>
  <p id="status">Connecting to the guardian at <a href="{{.URL}}">{{.URL}}</a>…</p>
  <p id="hint" hidden>It does not answer yet. Vigil keeps trying; the guardian's log tells
    why it is not up.</p>
</main>
<script>
(function () {
  var target = {{.URL}};
  var hintAt = Date.now() + {{.HintMillis}};
  var delay = 100;
  // Return to the page that failed, but only within the console's own origin.
  try {
    var next = new URLSearchParams(window.location.search).get("next");
    if (next && new URL(next).origin === new URL(target).origin) { target = next; }
  } catch (e) {}
  function go() { window.location.replace(target); }
  function attempt() {
    fetch(target, { mode: "no-cors", cache: "no-store" }).then(go, function () {
      document.getElementById("status").firstChild.nodeValue = "Waiting for the guardian at ";
      if (Date.now() >= hintAt) { document.getElementById("hint").hidden = false; }
      delay = Math.min(delay * 2, 2000);
      setTimeout(attempt, delay);
    });
  }
  attempt();
})();
</script>
</body>
</html>
`))

// startPage renders the page that hands the window over to the console at u.
func startPage(title string, u *url.URL) ([]byte, error) {
	var b bytes.Buffer
	err := startPageTemplate.Execute(&b, struct {
		Title      string
		URL        string
		HintMillis int64
	}{title, u.String(), startPageHint.Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("app: start page: %w", err)
	}
	return b.Bytes(), nil
}

// startPageHandler serves the start page at / (and /index.html) and nothing else: every
// other request of the console goes to the guardian once the page has navigated there.
func startPageHandler(title string, u *url.URL) (http.Handler, error) {
	page, err := startPage(title, u)
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/index.html" && r.URL.Path != "" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(page)
	}), nil
}
