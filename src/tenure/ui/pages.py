"""The HTML pages of `tenure ui`: one shell per page (navigation, who is signed in, the page's
``<main data-page=...>``); ``static/app.js`` fills it from the JSON API. The shell carries the
prefix, the role and the CSRF token as ``data-*`` attributes of ``<body>``. Action controls are
rendered only for a user who may write (and the server refuses the others' mutations anyway).
"""

from __future__ import annotations

from html import escape

from tenure.core.version import __version__
from tenure.ui.auth import Identity

PAGES = {"overview": "/", "queue": "/queues/{name}", "flow": "/flow", "jobs": "/jobs", "job": "/jobs/{id}",
         "dlq": "/dlq", "periodic": "/periodic", "workers": "/workers", "workflows": "/workflows",
         "workflow": "/workflows/{id}"}
"""Page name -> path below the prefix."""
TITLES = {"overview": "Queues", "queue": "Queue", "flow": "Flow", "jobs": "Jobs", "job": "Job", "dlq": "Dead letters",
          "periodic": "Periodic", "workers": "Workers", "workflows": "Workflows", "workflow": "Workflow"}
CURRENT = ' aria-current="page"'
NAV = ("overview", "flow", "jobs", "workflows", "dlq", "periodic", "workers")
CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"


def render(name: str, *, prefix: str, identity: Identity, csrf: str, job_id: str | None = None,
           queue: str | None = None) -> str:
    p = escape(prefix, quote=True)
    current = {"job": "jobs", "queue": "overview", "workflow": "workflows"}.get(name, name)
    links = "".join(f'<a href="{p}{PAGES[n]}" data-nav="{n}"{CURRENT if n == current else ""}>{TITLES[n]}</a>'
                    for n in NAV)
    title = f"{TITLES[name]} {escape(job_id)}" if name in ("job", "workflow") and job_id else TITLES[name]
    id_attr = f' data-{name}="{escape(job_id)}"' if job_id else ""
    if name == "queue" and queue is not None:
        title = f"Queue {escape(queue)}"
    mode = "" if identity.can_write else '<span class="badge" data-read-only>read-only</span>'
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · tenure</title>
<link rel="stylesheet" href="{p}/static/app.css">
<link rel="icon" href="data:,">
<script type="module" src="{p}/static/app.js"></script>
</head>
<body data-prefix="{p}" data-role="{escape(identity.role)}" data-can-write="{str(identity.can_write).lower()}"
      data-csrf="{escape(csrf)}" data-user="{escape(identity.user, quote=True)}">
<header>
<a class="brand" href="{p}/">tenure</a>
<nav>{links}</nav>
<span class="who">{escape(identity.user)} · {escape(identity.role)} {mode}</span>
</header>
<main data-page="{name}"{id_attr}{f' data-queue="{escape(queue, quote=True)}"' if queue is not None else ""}>
<h1>{title}</h1>
<div id="content" aria-live="polite"><p class="muted">Loading…</p></div>
</main>
<footer>tenure {escape(__version__)} · <a href="{p}/api/v1/openapi.json">API</a></footer>
</body>
</html>
"""


def error_page(prefix: str, message: str) -> str:
    p = escape(prefix, quote=True)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tenure</title>
<link rel="stylesheet" href="{p}/static/app.css"></head>
<body><main data-page="error"><h1>tenure</h1><p class="error">{escape(message)}</p></main></body></html>
"""
