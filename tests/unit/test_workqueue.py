"""The controller's work queue: due order, one worker per key, follow-ups before new work."""

from __future__ import annotations

import asyncio

import pytest

from erdma.controller.workqueue import WorkQueue


async def drain(queue: WorkQueue, count: int) -> list[str]:
    """The next ``count`` keys in the order ``get`` hands them out, each released at once."""
    keys = []
    for _ in range(count):
        key = await asyncio.wait_for(queue.get(), 30)
        queue.done(key)
        keys.append(key)
    return keys


async def test_due_keys_come_out_in_the_order_they_fell_due():
    queue = WorkQueue()
    for name in ("a", "b", "c"):
        queue.add(name)
    assert await drain(queue, 3) == ["a", "b", "c"]


async def test_a_follow_up_goes_before_older_new_work_once_its_time_has_come():
    """5,000 Nodes queued at start: a recheck of a Node whose ERIs attach must not wait for
    every one of them to have been started."""
    queue = WorkQueue()
    for i in range(5):
        queue.add(f"new-{i}")
    queue.add("attaching", 0.05, follow_up=True)
    assert await drain(queue, 1) == ["new-0"]
    await asyncio.sleep(0.06)
    assert await drain(queue, 2) == ["attaching", "new-1"]


async def test_a_follow_up_not_yet_due_waits_for_its_time():
    queue = WorkQueue()
    queue.add("attaching", 0.2, follow_up=True)
    queue.add("new")
    assert await drain(queue, 1) == ["new"]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), 0.05)
    assert await drain(queue, 1) == ["attaching"]


async def test_an_earlier_add_supersedes_a_later_one_whatever_its_kind():
    queue = WorkQueue()
    queue.add("node", 30.0)
    queue.add("node", 0.0, follow_up=True)
    queue.add("node", 10.0)  # later than what is already scheduled: no effect
    assert len(queue) == 1
    assert await drain(queue, 1) == ["node"]
    assert len(queue) == 0


async def test_a_key_is_never_handed_to_two_workers_and_an_add_meanwhile_runs_once_more():
    queue = WorkQueue()
    queue.add("node")
    key = await queue.get()
    queue.add("node", follow_up=True)
    queue.add("node")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), 0.05)  # still held by the first worker
    queue.done(key)
    assert await drain(queue, 1) == ["node"]
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), 0.05)


async def test_due_follow_ups_and_other_keys_take_turns_so_neither_starves():
    queue = WorkQueue()
    for i in range(3):
        queue.add(f"new-{i}")
        queue.add(f"attaching-{i}", follow_up=True)
    assert await drain(queue, 6) == [
        "attaching-0",
        "new-0",
        "attaching-1",
        "new-1",
        "attaching-2",
        "new-2",
    ]


async def test_a_watch_event_during_a_bring_up_does_not_send_the_recheck_behind_the_backlog():
    """The worker re-adds a Node as a follow-up while it still holds it; a watch event for the
    same Node (an add with no delay) arrives meanwhile: the recheck stays a follow-up."""
    queue = WorkQueue()
    queue.add("attaching")
    key = await queue.get()
    for i in range(3):
        queue.add(f"new-{i}")
    queue.add("attaching", 0.0, follow_up=True)
    queue.add("attaching")  # the watch event
    queue.done(key)
    assert await drain(queue, 2) == ["attaching", "new-0"]
