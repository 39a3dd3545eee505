"""A result with two columns of one name (``SELECT *`` over a join) keeps Spark's names on
DuckDB too (issue 27, item 5): ``word, word``, not DuckDB's ``word, word_1``, with
``etl sql``'s row limit as without it."""

from __future__ import annotations

import pyarrow as pa
from deltalake import write_deltalake

from catalog import JobSpec, SealRequest, TableSpec, load_catalog
from etl.reader import snapshot


def test_duplicate_names_are_kept_with_and_without_a_limit(tmp_path):
    catalog = load_catalog(None, warehouse=tmp_path)
    epoch = catalog.open_epoch().id
    for name, words in (("left_words", ["a"]), ("right_words", ["b", "c"])):
        location = str(tmp_path / name)
        catalog.register_table(TableSpec(name, location, kind="root"))
        catalog.register_job(JobSpec(f"ingest_{name}", output=name, source=f"feed_{name}"))
        lease = catalog.acquire_lease(f"ingest_{name}", "test", ttl_seconds=60)
        write_deltalake(location, pa.table({"word": words}))
        catalog.seal(f"ingest_{name}", lease.generation, [SealRequest(name, epoch, 0, rows=1)])
    with snapshot(catalog, ["left_words", "right_words"]) as snap:
        query = "SELECT * FROM left_words l CROSS JOIN right_words r ORDER BY r.word"
        for limit in (None, 1000, 1):
            result = snap.query(query, limit=limit)
            assert result.column_names == ["word", "word"], (limit, result.column_names)
            rows = snap.query_rows(query, limit=limit)  # etl sql's, without Arrow
            assert rows.columns == ("word", "word"), (limit, rows.columns)
        assert snap.query(query, limit=1).to_pylist() == [{"word": "b"}]
    catalog.close()
