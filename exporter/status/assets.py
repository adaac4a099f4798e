"""The status page's one script, inline (nothing is fetched from elsewhere); its style sheet is
``html_parts.style.STYLE``, shared with the HTML report."""

from __future__ import annotations

import base64
import hashlib

# Refreshes the page's content in place every data-refresh seconds: the new page is fetched and its
# <main> swapped in, so nothing flickers and the scroll position stays. When the exporter cannot be
# reached the header says so and the last content stays on screen.
SCRIPT = """(()=>{const s=Number(document.body.dataset.refresh)||0;if(!s)return;
const tick=async()=>{try{const r=await fetch(location.pathname,{cache:"no-store"});
if(!r.ok)throw new Error(String(r.status));
const d=new DOMParser().parseFromString(await r.text(),"text/html");
const n=d.getElementById("status"),o=document.getElementById("status");
if(n&&o){o.replaceWith(document.importNode(n,true));document.title=d.title;}
document.body.classList.remove("stale");}catch(e){document.body.classList.add("stale");}
setTimeout(tick,s*1000);};setTimeout(tick,s*1000);})();"""

SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()

# Only this page's own inline style and script run, and it may fetch only from this exporter.
CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{SCRIPT_HASH}'; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
