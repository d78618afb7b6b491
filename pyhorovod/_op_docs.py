"""Argument and error descriptions that several collectives' docstrings share.

`documented()` puts them where a docstring says {common_args} or {errors}, so help() and the API
reference show the full text.
"""

DOC_PARTS = {
    "common_args": """name: the request's name, the same on every rank (automatic when None).
        process_set: the ranks that take part (default: all); this rank must be one of them.
        dtype: the element type, for bit patterns of a type numpy lacks (``"bfloat16"``).
        timeout: seconds before the request fails with HorovodTimeoutError (default
            ``PYHOROVOD_TIMEOUT_SECONDS``).""",
    "errors": """Raises:
        ValueError: a bad argument (an unsupported dtype, a non-contiguous or, for in-place forms,
            read-only buffer, a scale factor that is not whole on integers, Average on bool, ...),
            raised on this rank before anything is sent.
        HorovodTimeoutError: not every rank of the set submitted the request in time.
        HorovodInternalError: the collective failed (a peer died, a connection broke).""",
}


def documented(func):
    for key, text in DOC_PARTS.items():
        if func.__doc__:  # None under python -OO
            func.__doc__ = func.__doc__.replace("{" + key + "}", text)
    return func
