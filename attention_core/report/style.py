"""The pages' shared style sheet (inline CSS): the submission's report and the class page."""

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1b1b1b;max-width:1200px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:6px 0}th,td{padding:3px 10px;border-bottom:1px solid #e4e4e4;text-align:left}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}tr.bad td{background:#fff3f3}
section.check{border:1px solid #ddd;border-left:4px solid #c62828;padding:8px 12px;margin:12px 0;border-radius:3px}
section.check h3{font-size:15px;margin:0 0 4px;font-family:monospace;word-break:break-all}
.status{display:inline-block;background:#c62828;color:#fff;border-radius:3px;padding:0 6px;margin-right:6px;
font:bold 12px sans-serif}
.meta{color:#555;margin:2px 0}.diagnosis{background:#fff8e1;border:1px solid #f0d58a;padding:6px 8px;margin:6px 0;
white-space:pre-wrap}
pre{background:#f6f6f6;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
details summary{cursor:pointer;font-weight:600}ul.passed{font-family:monospace;font-size:12px}
"""
