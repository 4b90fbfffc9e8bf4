from collections.abc import Callable
from typing import Any

class HotProduce:
    """produce() of an AuditedProducer (contract v2), in C (auditor/probes/_hotpath.c)."""

    def __init__(
        self,
        streams: dict[str, Any],
        new_topic: Callable[[str], Any],
        inner: Callable[..., Any],
        slow: Callable[..., None],
        lock: SeqLock,
        session: bytes,
        name: str,
        has_key_fn: bool,
        stream_type: type,
    ) -> None: ...
    def __call__(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Callable[..., None] | None = None,
        timestamp: int = 0,
        headers: Any = None,
        *,
        callback: Callable[..., None] | None = None,
    ) -> None: ...

class SeqLock:
    """A lock like threading.Lock that the native hot path takes without a method call."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...
    def release(self) -> None: ...
    def locked(self) -> bool: ...
    def __enter__(self) -> bool: ...
    def __exit__(self, *exc: object) -> None: ...

class RangeMarker:
    """mark_processed() of an AuditedConsumer (contract v2), in C: runs of consecutive offsets."""

    def __init__(self, every: int, compact: Callable[[], None], message_type: type) -> None: ...
    def __call__(self, msg: Any) -> None: ...
    def take(self) -> list[tuple[str, int, int, int]]: ...
    def taken_since_ms(self) -> int | None:
        """Wall clock (ms) at the first mark the last take() returned, None if it took none."""
    def reads_fields(self) -> bool: ...
    def runs_waiting(self) -> int: ...
    def __len__(self) -> int: ...
