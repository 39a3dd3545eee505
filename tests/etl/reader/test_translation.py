"""Kept translations (etl/reader/translation.py): a query run again is read back without
sqlglot, and gives exactly what sqlglot gives; nothing stale, foreign or damaged is used."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from etl.errors import SqlTablesError
from etl.reader import query, translation
from etl.reader.query import parse_query
from etl.reader.translation import CACHE_ENV, tables_in_sql, translate

QUERIES = [
    "SELECT w.word, c.cnt FROM words w JOIN word_counts c USING (word)",
    "WITH t AS (SELECT * FROM words) SELECT count(*), *, cnt + 1 FROM t JOIN counts USING (k)",
    "SELECT count(*) FROM a UNION ALL SELECT 1 FROM b",
    "SELECT /*+ BROADCAST(w) */ max(w.cnt) + 1, 'x' FROM words w",
    "SELECT category, avg(amount) AS mean FROM orders GROUP BY category",
    "SELECT * FROM words",
]
SCHEMA = {"orders": {"category": "string", "amount": "decimal(10,2)"}}
OTHER_SCHEMA = {"orders": {"category": "string", "amount": "double"}}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """An empty cache of this test's own; no translation kept in the process."""
    directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, str(directory))
    translate.cache_clear()
    yield directory / "queries"
    translate.cache_clear()


def no_sqlglot(monkeypatch):
    """From now on, a translation that needs sqlglot fails the test."""
    translate.cache_clear()

    def refuse(sql):
        raise AssertionError(f"sqlglot asked to parse {sql!r}")

    monkeypatch.setattr(query, "parse_query", refuse)


@pytest.mark.parametrize("sql", QUERIES)
def test_a_kept_translation_is_what_sqlglot_gives_and_needs_no_sqlglot(sql, monkeypatch):
    parsed = parse_query(sql)
    cold = translate(sql)
    cold_text = cold.for_duckdb(lambda: SCHEMA)
    no_sqlglot(monkeypatch)
    warm = translate(sql)
    assert warm == cold
    assert warm.tables == parsed.tables
    assert warm.for_duckdb(lambda: SCHEMA) == cold_text == parsed.for_duckdb(SCHEMA)
    returned = ["a", "b", "c", "d", "e", "f"][: max(1, len(parsed.output_names or ()))]
    assert warm.column_names(returned) == parsed.column_names(returned)


def test_an_average_is_typed_per_schema_each_kept(monkeypatch):
    sql = QUERIES[4]
    decimal = translate(sql).for_duckdb(lambda: SCHEMA)
    double = translate(sql).for_duckdb(lambda: OTHER_SCHEMA)
    assert "DECIMAL(14, 6)" in decimal and "DECIMAL" not in double
    no_sqlglot(monkeypatch)
    assert translate(sql).for_duckdb(lambda: SCHEMA) == decimal
    assert translate(sql).for_duckdb(lambda: OTHER_SCHEMA) == double
    with pytest.raises(AssertionError, match="sqlglot asked"):
        translate(sql).for_duckdb(lambda: {"orders": {"amount": "decimal(20,4)"}})


def test_without_a_kept_translation_sqlglot_is_needed(monkeypatch, cache):
    translate(QUERIES[0])
    no_sqlglot(monkeypatch)
    with pytest.raises(AssertionError, match="sqlglot asked"):
        translate(QUERIES[1])


def test_an_entry_of_another_translator_or_another_text_is_not_used(monkeypatch, cache):
    sql = QUERIES[0]
    translation.translator_fingerprint.cache_clear()
    monkeypatch.setattr(translation, "translator_fingerprint", lambda: "an older translator")
    translate(sql)
    (written,) = cache.glob("*.json")
    monkeypatch.undo()
    monkeypatch.setenv(CACHE_ENV, str(cache.parent))
    # The older translator's entry, moved to where this translator's would be.
    path = translation.entry_path(sql)
    written.rename(path)
    no_sqlglot(monkeypatch)
    with pytest.raises(AssertionError, match="sqlglot asked"):
        translate(sql)
    # This translator's fingerprint, but another query's text under this query's name.
    entry = json.loads(path.read_text())
    entry.update(fingerprint=translation.translator_fingerprint(), text=QUERIES[5])
    path.write_text(json.dumps(entry))
    with pytest.raises(AssertionError, match="sqlglot asked"):
        translate(sql)


@pytest.mark.parametrize(
    "damage",
    ["{not json", "[]", '{"format": 1}', "", "null"],
    ids=["syntax", "list", "partial", "empty", "null"],
)
def test_a_damaged_entry_is_translated_again_and_replaced(damage, monkeypatch, cache):
    sql = QUERIES[1]
    expected = translate(sql)
    text = expected.for_duckdb(dict)
    path = translation.entry_path(sql)
    if damage == '{"format": 1}':
        damage = json.dumps(
            {"format": 1, "fingerprint": translation.translator_fingerprint(), "text": sql}
        )
    path.write_text(damage)
    translate.cache_clear()
    assert translate(sql) == expected
    assert translate(sql).for_duckdb(dict) == text
    no_sqlglot(monkeypatch)
    assert translate(sql) == expected  # the entry was written again


def test_a_query_that_does_not_parse_is_never_kept(cache):
    for bad in ("SELECT FROM WHERE", "DROP TABLE words", "SELECT 1; SELECT 2"):
        with pytest.raises(SqlTablesError):
            translate(bad)
    assert not cache.exists() or not list(cache.iterdir())
    with pytest.raises(SqlTablesError, match="reads no table"):
        tables_in_sql("SELECT 1")


def test_entries_are_private_and_the_oldest_go_past_the_limit(monkeypatch, cache):
    monkeypatch.setattr(translation, "MAX_ENTRIES", 3)
    for sql in QUERIES[:5]:
        translate(sql)
    kept = list(cache.glob("*.json"))
    assert len(kept) == 3
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in kept)
    assert not list(cache.glob("*.tmp"))
    no_sqlglot(monkeypatch)
    for sql in QUERIES[2:5]:
        translate(sql)
    with pytest.raises(AssertionError, match="sqlglot asked"):
        translate(QUERIES[0])


def test_no_cache_when_turned_off_or_unwritable(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, "")
    assert translate(QUERIES[0]).tables == ("words", "word_counts")
    assert translation.cache_directory() is None
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocker))
    translate.cache_clear()
    assert translate(QUERIES[0]).tables == ("words", "word_counts")  # the read goes on
    assert blocker.read_text() == "not a directory"


def test_the_default_cache_is_the_users_and_none_without_a_home(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert translation.cache_directory() == tmp_path / "xdg" / "delta-barrier" / "queries"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert (
        translation.cache_directory() == tmp_path / "home" / ".cache" / "delta-barrier" / "queries"
    )

    def homeless(cls):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", classmethod(homeless))
    assert translation.cache_directory() is None
    assert translate(QUERIES[0]).tables == ("words", "word_counts")  # the read goes on
