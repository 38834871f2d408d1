"""The page-fault cost tool: first and second touch of fresh pages, and the counter it reads."""
import mmap

from research.simulator_validation import page_fault_cost as tool


def test_the_page_fault_counter_reads_the_process_count():
    # how many faults a first touch takes depends on the kernel (huge pages, fault-around):
    # only that the counter is a count that never goes back is checked
    before = tool.minor_page_faults()
    fresh = mmap.mmap(-1, 64 * mmap.PAGESIZE)
    for p in range(64):
        fresh[p * mmap.PAGESIZE] = 1
    fresh.close()
    after = tool.minor_page_faults()
    assert isinstance(before, int) and 0 <= before <= after


def test_the_page_fault_cost_tool_times_first_and_second_touch():
    fresh, faults, again = tool.first_touch(512 * mmap.PAGESIZE)
    assert isinstance(faults, int) and faults >= 0   # the count itself depends on the kernel
    assert fresh > 0 and again > 0
