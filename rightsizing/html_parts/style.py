"""The style sheet of the status page and the HTML report: light and dark (``prefers-color-scheme``),
readable from phone width to 1280 px (table rows become cards at 960 px and below). Inline in each
document; nothing is fetched from elsewhere."""

from __future__ import annotations

STYLE = """
:root{color-scheme:light dark;--bg:#f6f7f9;--fg:#1b1f24;--muted:#5b6470;--card:#fff;--line:#d9dde3;
--c1:#2563eb;--c2:#d97706;--idle:#64748b;--over:#b45309;--right:#15803d;--under:#b91c1c;--none:#6b7280}
@media (prefers-color-scheme:dark){:root{--bg:#0f1318;--fg:#e6e9ee;--muted:#9aa4b1;--card:#171c23;
--line:#2a313b;--c1:#60a5fa;--c2:#fbbf24;--idle:#94a3b8;--over:#f59e0b;--right:#4ade80;--under:#f87171;
--none:#9ca3af}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,sans-serif}
header,main{max-width:1280px;margin:0 auto;padding:0 16px}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:4px 16px;padding-top:16px}
h1{font-size:20px;margin:0}h1 small{font-weight:400;color:var(--muted)}
h2{font-size:16px;margin:24px 0 8px}
nav{display:flex;flex-wrap:wrap;gap:4px 12px;margin-left:auto}
a{color:var(--c1)}
.muted,.note,figcaption{color:var(--muted)}
.stale .live{display:inline}.live{display:none;color:var(--under);font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(220px,1fr));gap:12px;margin-top:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
.card h3{margin:0 0 6px;font-size:12px;font-weight:600;text-transform:uppercase;letter-spacing:.04em;
color:var(--muted)}
.big{font-size:26px;font-weight:650}
@media (min-width:961px){.card.wide{grid-column:span 2}}
.card ul{margin:0;padding-left:18px}
.chips{display:flex;flex-wrap:wrap;gap:6px}
.verdict{display:inline-block;border-radius:999px;padding:1px 9px;font-size:12px;font-weight:600;
border:1px solid currentColor;white-space:nowrap}
.v-idle{color:var(--idle)}.v-overprovisioned{color:var(--over)}.v-rightsized{color:var(--right)}
.v-underprovisioned{color:var(--under)}.v-insufficient_data,.v-unknown{color:var(--none)}
.v-unknown{border-style:dashed}
table{width:100%;border-collapse:collapse;background:var(--card);border:1px solid var(--line);
border-radius:8px;overflow:hidden}
th,td{text-align:left;vertical-align:top;padding:8px 10px;border-top:1px solid var(--line)}
th{font-size:12px;color:var(--muted);font-weight:600;border-top:0}
th.num{text-align:right}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr.charts td{border-top:0;padding-top:0}
.reason{color:var(--muted);font-size:12.5px;max-width:420px}
.tag{display:inline-block;font-size:12px;background:var(--bg);border:1px solid var(--line);border-radius:4px;
padding:0 5px;margin:0 4px 2px 0}
code,.id{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;overflow-wrap:anywhere}
.id{display:block;max-width:16ch;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.bar{height:4px;background:var(--line);border-radius:2px;margin-top:4px;width:80px}
.bar span{display:block;height:100%;background:var(--c1);border-radius:2px}
.grid4{display:grid;grid-template-columns:repeat(4,minmax(0,1fr));gap:12px}
figure.chart{margin:0;position:relative}
figcaption{font-size:12px}
svg{display:block;width:100%;height:44px;overflow:visible}
.plot{display:flex;gap:4px}.plot svg{flex:1;min-width:0}
.yaxis{display:flex;flex-direction:column;justify-content:space-between;height:44px;width:30px;
font-size:10px;line-height:1;color:var(--muted);text-align:right;flex:none}
.xaxis{display:flex;justify-content:space-between;margin-left:34px;font-size:10px;color:var(--muted)}
svg line{stroke:var(--line);stroke-width:1;vector-effect:non-scaling-stroke}
svg line.grid{stroke-dasharray:2 3}
svg polyline{fill:none;stroke-width:1.6;vector-effect:non-scaling-stroke;stroke-linejoin:round}
svg .s1{stroke:var(--c1);fill:none}svg .s2{stroke:var(--c2);stroke-dasharray:3 2}
svg circle.s1{fill:var(--c1)}svg circle.s2{fill:var(--c2)}
.empty{position:absolute;left:0;right:0;top:22px;text-align:center;font-size:12px;color:var(--muted)}
.legend{display:flex;gap:10px;font-size:11.5px;color:var(--muted)}
.key::before{content:"";display:inline-block;width:10px;height:2px;margin-right:4px;vertical-align:middle;
background:var(--c1)}.key.s2::before{background:var(--c2)}
.ok{color:var(--right)}.bad{color:var(--under)}
footer{color:var(--muted);font-size:12px;margin:24px 0}
@media (max-width:960px){
 nav{margin-left:0}
 table,thead,tbody,tr,td{display:block;width:100%}
 thead{display:none}
 tr{border-top:1px solid var(--line)}
 tr.gpu{display:grid;grid-template-columns:1fr 1fr;padding-top:6px}
 tr.gpu td{width:auto}tr.gpu td:nth-child(-n+3){grid-column:1/-1}
 tr.charts{border-top:0}
 td{border:0;padding:4px 12px}
 td[data-label]::before{content:attr(data-label);display:block;font-size:11px;color:var(--muted)}
 td.num{text-align:left}
 tr.charts td{padding-bottom:12px}
 .grid4{grid-template-columns:repeat(2,minmax(0,1fr))}
}
"""
