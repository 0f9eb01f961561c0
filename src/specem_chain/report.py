"""The provenance view: one self-contained HTML page that shows who wrote each segment.

``report()`` reads the provenance that ``specem chat --json`` prints (``Answer.to_json()``) or
that ``SpecEMChatModel`` puts in ``AIMessage.response_metadata["specem"]``. The page has no
external resources: inline CSS, an inline SVG chart, no script.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

PALETTE = ("#0f7b8a", "#b4367a", "#3f7f2a", "#b8860b", "#3b5bdb", "#c0392b", "#6f42c1")


@dataclass(frozen=True)
class Provenance:
    """What the page shows, gathered from either source."""

    text: str
    members: list[str]
    segments: list[Mapping[str, Any]]
    wins: Mapping[str, int]
    weights: Mapping[str, float]
    finish_reason: str | None


def provenance_of(source: BaseMessage | Mapping[str, Any]) -> Provenance:
    """Read the provenance of an AIMessage or of the ``specem chat --json`` object."""
    from langchain_core.messages import BaseMessage  # here: the CLI reads no messages

    if isinstance(source, BaseMessage):
        specem = source.response_metadata.get("specem") or {}
        if not specem.get("segments") or "wins" not in specem:
            raise ValueError(
                "this message has no SpecEM provenance: report() needs the whole answer of a "
                "SpecEMChatModel (when streaming, add the chunks together first)"
            )
        return Provenance(
            text=source.text,
            members=list(specem["wins"]),
            segments=specem["segments"],
            wins=specem["wins"],
            weights=specem["weights"],
            finish_reason=specem.get("finish_reason"),
        )
    missing = {"text", "segments", "members", "wins", "weights"} - set(source)
    if missing:
        raise ValueError(
            f"not the output of `specem chat --json`: missing {', '.join(sorted(missing))}"
        )
    return Provenance(
        text=source["text"],
        members=list(source["members"]),
        segments=source["segments"],
        wins=source["wins"],
        weights=source["weights"],
        finish_reason=source.get("finish_reason"),
    )


def report(source: BaseMessage | Mapping[str, Any], *, question: str | None = None) -> str:
    """A self-contained HTML page showing the answer's provenance.

    ``source`` is an ``AIMessage`` from :class:`~specem_chain.SpecEMChatModel` (the whole
    answer: add streamed chunks together first) or the object that ``specem chat --json``
    prints, parsed. Each segment is coloured by the member that wrote it; hovering (or
    focusing) it shows the losing candidates and the score matrix. A chart shows the
    members' weights over the rounds.
    """
    data = provenance_of(source)
    members = list(data.members)
    for segment in data.segments:  # a member missing from the list still gets a colour
        if segment["member"] not in members:
            members.append(segment["member"])
    colours = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(members)}
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>SpecEM answer provenance</title>",
        f"<style>{CSS}{member_css(colours)}</style></head><body><main>",
        "<h1>SpecEM answer provenance</h1>",
    ]
    if question:
        parts.append(f'<p class="question"><b>Question:</b> {escape(question)}</p>')
    parts += [
        legend(members, data.wins, data.weights),
        "<h2>Answer <small>(hover or focus a segment)</small></h2>",
        f'<div class="answer">{answer_html(data, members)}</div>',
        f'<p class="finish">finish reason: {escape(str(data.finish_reason))}, '
        f"{len(data.segments)} rounds</p>",
        "<h2>Weights over the rounds</h2>",
        weights_svg(data.segments, members, colours),
        "</main></body></html>",
    ]
    return "\n".join(parts)


def member_css(colours: Mapping[str, str]) -> str:
    return "".join(f".m{i}{{--c:{colour}}}" for i, colour in enumerate(colours.values()))


def legend(members: Sequence[str], wins: Mapping[str, int], weights: Mapping[str, float]) -> str:
    rows = "".join(
        f'<tr><td><span class="swatch m{i}"></span>{escape(m)}</td>'
        f"<td>{int(wins.get(m, 0))}</td><td>{weights.get(m, math.nan):.3f}</td></tr>"
        for i, m in enumerate(members)
    )
    return (
        '<table class="legend"><thead><tr><th>member</th><th>wins</th>'
        f"<th>final weight</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def answer_html(data: Provenance, members: Sequence[str]) -> str:
    """The answer, a span per segment; each segment text is clipped to the answer, since a
    stop sequence can end the answer inside the last segments."""
    spans, shown = [], 0
    for index, segment in enumerate(data.segments, start=1):
        piece = segment["text"][: max(len(data.text) - shown, 0)]
        shown += len(piece)
        member = segment["member"]
        spans.append(
            f'<span class="seg m{members.index(member)}" tabindex="0" data-round="{index}" '
            f'data-member="{escape(member)}">{escape(piece) or "&#8203;"}'
            f'<span class="tip" role="tooltip">{segment_detail(index, segment)}</span></span>'
        )
    return "".join(spans)


def segment_detail(index: int, segment: Mapping[str, Any]) -> str:
    """Round header, the losing candidates, and the score matrix with its weighted total."""
    winner = segment["member"]
    candidates = segment["candidates"]
    losers = [c for c in candidates if c["member"] != winner]
    lost = (
        "".join(
            f'<span class="cand"><b>{escape(c["member"])}</b> '
            f'<q class="text">{escape(c["text"])}</q></span>'
            for c in losers
        )
        or '<span class="cand">no rival candidate this round</span>'
    )
    return (
        f'<span class="head">round {index}: won by <b>{escape(winner)}</b></span>'
        f'<span class="sub">losing candidates</span><span class="losers">{lost}</span>'
        f'<span class="sub">score matrix (rows: verifiers, columns: candidates)</span>'
        f"{score_matrix(segment)}"
    )


def score_matrix(segment: Mapping[str, Any]) -> str:
    """The score matrix as spans laid out as a table (a tooltip lives inside a span)."""
    columns = [c["member"] for c in segment["candidates"]]
    weights = segment["weights"]
    scores = segment["scores"]
    verifiers = segment["verifiers"]

    def row(cells: Sequence[str], cls: str = "tr") -> str:
        return f'<span class="{cls}">' + "".join(cells) + "</span>"

    def cell(text: str, cls: str = "td") -> str:
        return f'<span class="{cls}">{text}</span>'

    header = row(
        [cell("verifier (weight)", "th")]
        + [cell(escape(c), "th win" if c == segment["member"] else "th") for c in columns]
    )
    body = [
        row(
            [cell(f"{escape(v)} ({weights.get(v, math.nan):.3f})")]
            + [cell(f"{s:.3f}") for s in scores[j]]
        )
        for j, v in enumerate(verifiers)
    ]
    totals = [
        math.fsum(weights.get(v, 0.0) * scores[j][k] for j, v in enumerate(verifiers))
        for k in range(len(columns))
    ]
    footer = row([cell("weighted total", "th")] + [cell(f"{t:.3f}") for t in totals])
    return f'<span class="matrix">{header}{"".join(body)}{footer}</span>'


def weights_svg(
    segments: Sequence[Mapping[str, Any]], members: Sequence[str], colours: Mapping[str, str]
) -> str:
    """A line per member: its weight at the start (uniform) and after every round."""
    width, height, left, right, top, bottom = 640, 240, 48, 16, 12, 32
    rounds = len(segments)
    series = {m: [1.0 / len(members)] for m in members}
    for segment in segments:
        for m in members:
            series[m].append(segment["weights"].get(m, series[m][-1]))

    def x(t: int) -> float:
        return left + (width - left - right) * t / max(rounds, 1)

    def y(w: float) -> float:
        return top + (height - top - bottom) * (1 - w)

    grid = "".join(
        f'<line x1="{left}" x2="{width - right}" y1="{y(g):.1f}" y2="{y(g):.1f}" '
        f'class="grid"/><text x="{left - 6}" y="{y(g) + 4:.1f}" text-anchor="end">{g:.2f}</text>'
        for g in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    axis = (
        f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">'
        f"round (0 = start, {rounds} = last)</text>"
    )
    lines = "".join(
        f'<polyline fill="none" stroke="{colours[m]}" stroke-width="2" points="'
        + " ".join(f"{x(t):.1f},{y(w):.1f}" for t, w in enumerate(series[m]))
        + f'"><title>{escape(m)}: {series[m][-1]:.3f} after round {rounds}</title></polyline>'
        for m in members
    )
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="member weights per round">'
        f"{grid}{axis}{lines}</svg>"
    )


CSS = """
body{font:15px/1.5 system-ui,sans-serif;color:#1d1d1f;background:#fff;margin:0}
main{max-width:920px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}small{font-weight:normal;color:#666}
.question{background:#f4f4f6;padding:8px 12px;border-radius:6px}
table.legend{border-collapse:collapse}
.legend td,.legend th{padding:2px 12px 2px 0;text-align:left}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;
 background:var(--c)}
.answer{position:relative;white-space:pre-wrap;font-size:1.05em;line-height:1.9;padding:12px;
 border:1px solid #ddd;border-radius:6px}
.seg{color:var(--c);background:color-mix(in srgb,var(--c) 12%,#fff);
 border-bottom:2px solid var(--c);border-radius:2px;cursor:help;outline:none}
.seg:hover,.seg:focus{background:color-mix(in srgb,var(--c) 28%,#fff)}
.tip{display:none;position:absolute;left:-1px;right:-1px;top:calc(100% + 4px);z-index:10;
 white-space:normal;color:#1d1d1f;background:#fff;border:1px solid #bbb;border-radius:6px;
 padding:8px 12px;box-shadow:0 4px 16px rgba(0,0,0,.18);font-size:.9em;line-height:1.45}
.seg:hover>.tip,.seg:focus>.tip{display:block}
.tip .head,.tip .sub,.tip .cand{display:block}.tip .sub{color:#666;margin-top:6px}
.tip .text{white-space:pre-wrap;font-family:ui-monospace,monospace}
.matrix{display:table;border-collapse:collapse;margin-top:2px}
.tr{display:table-row}.td,.th{display:table-cell;padding:1px 8px;border:1px solid #ddd;
 text-align:right;font-variant-numeric:tabular-nums}
.th,.td:first-child{text-align:left}.th{font-weight:600}.th.win{text-decoration:underline}
.chart text{font-size:11px;fill:#555}.chart .grid{stroke:#e3e3e3}
.finish{color:#666}
"""
