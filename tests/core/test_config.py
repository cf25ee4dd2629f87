from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.core.config import FsyncPolicy, build_settings
from magnetar.core.errors import ConfigError


def test_defaults_need_no_file() -> None:
    s = build_settings(env={})
    assert s.fsync == FsyncPolicy("always")
    assert s.journal_path == Path("data/journal")
    assert s.ledger_path == Path("data/ledgers")
    assert (s.pulsar_port, s.http_port, s.kafka_port, s.flight_port) == (6650, 8080, 9092, 8815)


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    cfg = tmp_path / "m.toml"
    cfg.write_text(
        'data_dir = "/from/file"\nfsync = "never"\n'
        "[storage]\nsegment-max-bytes = 1000\nsegment_max_entries = 7\n"
    )
    env = {"MAGNETAR_FSYNC": "interval:5", "MAGNETAR_SEGMENT_MAX_BYTES": "2000", "OTHER": "x"}
    s = build_settings(config_file=cfg, env=env, overrides={"segment_max_bytes": 3000})
    assert s.data_dir == Path("/from/file")
    assert s.fsync == FsyncPolicy("interval", 5)
    assert s.segment_max_bytes == 3000
    assert s.segment_max_entries == 7


@pytest.mark.parametrize(
    ("overrides", "setting"),
    [
        ({"segment_max_bytes": -1}, "segment_max_bytes"),
        ({"fsync": "sometimes"}, "fsync"),
        ({"fsync": "interval:0"}, "fsync"),
        ({"pulsar_port": 70000}, "pulsar_port"),
        ({"segment_max_age": -3}, "segment_max_age"),
        ({"tail_cache_bytes": "lots"}, "tail_cache_bytes"),
        ({"no_such_thing": 1}, "no_such_thing"),
        ({"metadata_url": "mysql://x"}, "metadata_url"),
    ],
)
def test_bad_values_name_the_setting(overrides: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigError) as e:
        build_settings(env={}, overrides=overrides)
    assert e.value.setting == setting
    assert setting in str(e.value)


def test_bad_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        build_settings(config_file=tmp_path / "missing.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        build_settings(config_file=bad, env={})


def test_views_python_path_is_a_list_of_directories(tmp_path: Path) -> None:
    assert build_settings(env={}).views_python_dirs == ()
    env = {"MAGNETAR_VIEWS_PYTHON_PATH": f"{tmp_path / 'a'}:{tmp_path / 'b'}"}
    assert build_settings(env=env).views_python_dirs == (tmp_path / "a", tmp_path / "b")
    cfg = tmp_path / "m.toml"
    cfg.write_text(f'views_python_path = ["{tmp_path}", "rel"]\n')
    dirs = build_settings(config_file=cfg, env={}).views_python_dirs
    assert dirs == (tmp_path.resolve(), Path("rel").resolve())
