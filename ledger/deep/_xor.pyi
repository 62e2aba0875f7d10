import numpy as np

_Buffer = bytes | bytearray | memoryview | np.ndarray

def decode_into(
    data: _Buffer,
    starts: _Buffer,
    ends: _Buffer,
    counts: _Buffer,
    ranks: _Buffer,
    offsets: _Buffer,
    out_chunk: _Buffer,
    out_times: _Buffer,
    out_values: _Buffer,
) -> str | None: ...
