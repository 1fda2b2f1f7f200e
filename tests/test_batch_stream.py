"""The trainer's batch streams: the cursor a checkpoint saves is where the stream stands."""

from askalike.train.trainer import BatchStream, Cursor


def _epoch(epoch: int) -> list[list[int]]:
    return [[epoch, 0], [epoch, 1], [epoch]]  # the short last batch is never served


def test_cursor_follows_the_stream_into_the_next_epoch():
    cursor = Cursor()
    stream = BatchStream(_epoch, 2, cursor)
    assert [stream.next() for _ in range(3)] == [[0, 0], [0, 1], [1, 0]]
    assert (cursor.epoch, cursor.index) == (1, 1)
    resumed = BatchStream(_epoch, 2, Cursor(cursor.epoch, cursor.index))
    assert [resumed.next() for _ in range(3)] == [stream.next() for _ in range(3)]
