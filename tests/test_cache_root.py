"""safetyrepro/cache_root.py: the one cache folder."""

from __future__ import annotations


def test_a_relative_cache_dir_is_made_absolute_so_configs_written_under_it_work_from_any_folder(tmp_path, monkeypatch):
    from safetyrepro.cache_root import cache_root

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAFETYREPRO_CACHE_DIR", "rel/cache")
    root = cache_root()
    assert root.is_absolute() and root == tmp_path / "rel" / "cache"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert cache_root() == tmp_path / "elsewhere" / "rel" / "cache"  # read anew, relative to the folder it is read in
