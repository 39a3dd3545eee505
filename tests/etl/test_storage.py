"""Listing a warehouse's directories while other writers create them."""

from __future__ import annotations

import threading

from etl.storage import filesystem, list_directory


def test_a_directory_created_while_it_is_listed_is_listed_not_reported_missing(tmp_path):
    """Each round, one thread creates a directory (holding one file) while another lists
    it: the listing is empty or the directory's, never FileNotFoundError. Arrow's own
    listing, asked to allow a missing directory, raises it in a few percent of such
    rounds (it opens the directory, finds none, then checks again and finds one); a
    table's log listed while another writer creates the table is such a directory."""
    rounds = 3000
    fs, root = filesystem(str(tmp_path))
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def create() -> None:
        for i in range(rounds):
            start.wait()
            (tmp_path / str(i)).mkdir()
            (tmp_path / str(i) / "00000000000000000000.json").write_text("{}")

    creator = threading.Thread(target=create)
    creator.start()
    for i in range(rounds):
        start.wait()
        try:
            listed = list_directory(fs, f"{root}/{i}")
        except FileNotFoundError as exc:
            failures.append(exc)
            continue
        assert [info.base_name for info in listed] in ([], ["00000000000000000000.json"])
    creator.join()
    assert failures == []


def test_a_missing_directory_lists_empty_and_a_file_is_not_a_directory(tmp_path):
    fs, root = filesystem(str(tmp_path))
    assert list_directory(fs, f"{root}/absent") == []
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a").write_text("x")
    (tmp_path / "sub" / "b").mkdir()
    (tmp_path / "sub" / "b" / "c").write_text("y")
    assert sorted(i.base_name for i in list_directory(fs, f"{root}/sub")) == ["a", "b"]
    assert sorted(i.base_name for i in list_directory(fs, f"{root}/sub", recursive=True)) == [
        "a",
        "b",
        "c",
    ]
