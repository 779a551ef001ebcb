"""A scripted host for guided runs: answers pending items as the scripted provider would."""

from __future__ import annotations

import asyncio

from openprose.engine import ProviderError, ScriptedProvider
from openprose.mcp_server.guided import HostProvider, ItemRefused, SessionItem


async def answer_items(host: HostProvider, script: ScriptedProvider, items: list) -> int:
    """Answer ``items`` one after the other (skipping any that ended meanwhile)."""
    answered = 0
    for item in items:
        if item.token not in host.pending:
            continue
        try:
            if isinstance(item, SessionItem):
                try:
                    result = await script.run_session(item.request, item.io)
                except ProviderError as err:
                    await host.fail_session(item.token, str(err), err.retryable)
                else:
                    await host.complete_session(item.token, result.output or "", result.summary)
            else:
                verdict = await script.judge(item.request)
                await host.submit_verdict(item.token, verdict.value, verdict.reason)
        except ItemRefused:
            continue
        answered += 1
    return answered


async def host_loop(host: HostProvider, script: ScriptedProvider, done: asyncio.Future,
                    reverse: bool = False) -> None:
    """Answer whatever is pending until ``done`` (the run) finishes."""
    while not done.done():
        items = await host.wait_for_items(0.05)
        fresh = [item for item in items if item.issued == 1]
        await answer_items(host, script, fresh[::-1] if reverse else fresh)
