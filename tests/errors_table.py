"""One test case per MagnetarError class, for the tables of the servers' error mappings
(HTTP, Pulsar, Kafka) and of the classes' declared wire codes: the walk of
:func:`magnetar.testing.errors.error_classes` finds a class added later without being told.

    @EVERY_ERROR_CLASS
    def test_...(cls: type[MagnetarError]) -> None: ...
"""

from __future__ import annotations

import pytest

from magnetar.testing.errors import error_classes, error_id

ERROR_CLASSES = error_classes()
EVERY_ERROR_CLASS = pytest.mark.parametrize("cls", ERROR_CLASSES, ids=error_id)
