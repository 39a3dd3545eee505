"""Consistent reads without Spark: table extraction by scope, DuckDB against Spark on the
same snapshot (word-count and shop chains, every level), the snapshot as a context
manager and as data, and the read side of the ``etl`` command."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pytest

from catalog import SCHEMA_VERSION, load_catalog
from etl import Runner, snapshot
from etl.errors import SqlTablesError
from etl.reader import SnapshotClosedError, parse_query, tables_in_sql
from tests.support.cli_runner import ETL, REPO, etl
from tests.support.wordcount_env import make_chain

LEVELS = ("read-uncommitted", "read-committed", "repeatable-read")
ANSI = re.compile(r"\x1b\[")

# -- tables by scope analysis (no Spark) ----------------------------------------------


@pytest.mark.parametrize(
    ("sql", "tables"),
    [
        ("SELECT /*+ BROADCAST(w) */ * FROM words w", ["words"]),
        ("SELECT * FROM WORDS", ["WORDS"]),
        ("WITH words AS (SELECT * FROM word_counts) SELECT * FROM words", ["word_counts"]),
        (
            "SELECT * FROM words w JOIN (WITH words AS (SELECT 'x' AS word) "
            "SELECT * FROM words) x USING (word)",
            ["words"],
        ),
        ("SELECT * FROM a UNION ALL SELECT * FROM b", ["a", "b"]),
        ("SELECT (SELECT max(x) FROM c) FROM d WHERE EXISTS (SELECT 1 FROM e)", ["c", "d", "e"]),
        ("SELECT w.word FROM words AS w JOIN words AS v ON w.word = v.word", ["words"]),
    ],
)
def test_tables_come_from_scope_analysis(sql, tables):
    assert tables_in_sql(sql) == tables


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("SELECT a * FROM words WHERE", "cannot parse the SQL: incomplete expression (line 1"),
        ("INSERT INTO words SELECT 'x', 1", "only queries"),
        ("SELECT 1 FROM a; SELECT 2 FROM b", "one query"),
        ("SELECT 1", "reads no table"),
    ],
)
def test_bad_sql_is_explained_in_words(sql, says):
    with pytest.raises(SqlTablesError) as caught:
        tables_in_sql(sql)
    message = str(caught.value)
    assert says in message
    assert "<class" not in message and "Required keyword" not in message
    assert not ANSI.search(message)


def test_duckdb_dialect_drops_spark_hints():
    assert "BROADCAST" not in parse_query("SELECT /*+ BROADCAST(w) */ * FROM words w").for_duckdb()


def test_a_parsed_query_is_kept_for_the_process_and_never_changed_by_a_translation():
    query = "SELECT word, avg(price) FROM prices GROUP BY word"
    parsed = parse_query(query)
    spark_text = parsed.expression.sql(dialect="spark")
    translated = parsed.for_duckdb({"prices": {"word": "string", "price": "decimal(10,2)"}})
    assert "DECIMAL(14, 6)" in translated  # Spark's type of the average, cast in place...
    assert parse_query(query) is parsed
    assert parsed.expression.sql(dialect="spark") == spark_text  # ...of a copy


# -- chains shared by the engine tests -----------------------------------------------------


@pytest.fixture(scope="module")
def wordcount(spark, tmp_path_factory):
    chain = make_chain(tmp_path_factory.mktemp("reads_wc"), spark)
    chain.drop("a.txt", ["apple", "pear", "apple"])
    chain.runner.run_once()
    chain.drop("b.txt", ["pear", "fig", "kiwi"])
    chain.runner.run_once()
    return chain


@pytest.fixture(scope="module")
def shop(spark, tmp_path_factory):
    """The shop chain with a JSON drop directory in place of the Kafka topic."""
    import examples.shop.pipeline as shop_pipeline
    from etl import FileSource

    root = tmp_path_factory.mktemp("reads_shop")
    incoming = root / "orders"
    incoming.mkdir()

    def file_source(name, *, topics, bootstrap_servers, schema):
        return FileSource(name, path=incoming, format="json", schema=schema)

    original = shop_pipeline.KafkaSource
    shop_pipeline.KafkaSource = file_source
    try:
        pipeline = shop_pipeline.build("unused:0", "orders")
    finally:
        shop_pipeline.KafkaSource = original
    catalog = load_catalog(warehouse=root / "warehouse")
    runner = Runner(pipeline, catalog=catalog, warehouse=str(root / "warehouse"), spark=spark)
    runner.register()
    orders = [
        {
            "order_id": i,
            "customer": f"c{i % 4}",
            "amount": f"{(i * 37) % 260}.{i % 100:02d}",
            "items": i % 3,
        }
        for i in range(1, 41)
    ]
    for batch, part in enumerate((orders[:25], orders[25:])):
        (incoming / f"{batch}.json").write_text("\n".join(json.dumps(o) for o in part) + "\n")
        runner.run_once()
    return catalog


WORDCOUNT_QUERIES = [
    "SELECT w.word, w._epoch, c.cnt, n.words FROM words w JOIN word_counts c USING (word) "
    "JOIN cnt_counts n USING (cnt)",
    "SELECT /*+ BROADCAST(c) */ c.cnt, count(*) AS n FROM WORDS w JOIN word_counts c ON "
    "w.word = c.word GROUP BY c.cnt",
    "WITH words AS (SELECT word, cnt FROM word_counts WHERE cnt > 1) SELECT * FROM words",
    "SELECT cnt, words FROM cnt_counts ORDER BY cnt DESC NULLS LAST",
    # unnamed columns are named as Spark names them, on both engines (issue 27)
    "SELECT count(*), max(c.WORD), c.cnt * 2 + 1, NULL AS nothing, '-', Cnt FROM word_counts c "
    "GROUP BY c.cnt",
]
SHOP_QUERIES = [
    "SELECT f.customer, sum(f.amount) AS detail, t.total, t.orders, t.tier FROM order_facts f "
    "JOIN customer_totals t USING (customer) GROUP BY f.customer, t.total, t.orders, t.tier",
    "SELECT size, count(*) AS n, avg(item_price) AS avg_price, avg(amount), max(amount) AS top "
    "FROM order_facts "
    "GROUP BY size",
    "SELECT o.order_id, o.amount, f.item_price, f.size FROM orders o JOIN order_facts f "
    "USING (order_id) WHERE o.items = 0",
    "SELECT tier, customers FROM tier_counts",
]


def _canonical(table) -> list[tuple]:
    rows = [tuple(r.values()) for r in table.to_pylist()]

    def norm(v):
        if isinstance(v, float):
            return round(v, 9)
        if isinstance(v, Decimal):
            return v.normalize()
        return v

    return sorted((tuple(norm(v) for v in row) for row in rows), key=repr)


def _compare(catalog, spark, query, level):
    with snapshot(catalog, query, level, spark=spark) as snap:
        duck = snap.query(query, engine="duckdb")
        sparked = snap.query(query, engine="spark")
    assert duck.column_names == sparked.column_names, query
    assert _canonical(duck) == _canonical(sparked), (level, query)
    return _canonical(duck)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_duckdb_and_spark_agree_on_the_wordcount_chain(wordcount, spark, level):
    answers = [_compare(wordcount.catalog, spark, q, level) for q in WORDCOUNT_QUERIES]
    assert answers[0], "the join holds rows"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_duckdb_and_spark_agree_on_the_shop_chain(shop, spark, level):
    answers = [_compare(shop, spark, q, level) for q in SHOP_QUERIES]
    assert answers[0] and answers[2], "the shop joins hold rows"


@pytest.mark.spark
@pytest.mark.slow
def test_duckdb_and_spark_agree_at_a_past_epoch(wordcount, spark):
    query = WORDCOUNT_QUERIES[0]
    with snapshot(wordcount.catalog, query, spark=spark, as_of_epoch=1) as snap:
        duck, sparked = snap.query(query), snap.query(query, engine="spark")
    assert _canonical(duck) == _canonical(sparked)
    assert {row[0] for row in _canonical(duck)} == {"apple", "pear"}


# -- the snapshot in Python --------------------------------------------------------------


@pytest.mark.spark
def test_snapshot_is_a_context_manager_with_duckdb_polars_arrow(wordcount):
    catalog = wordcount.catalog
    with snapshot(catalog, ["words", "word_counts", "cnt_counts"]) as snap:
        epoch = snap.epoch
        assert snap.barrier_ts == catalog.get_epoch(epoch).barrier_ts
        connection = snap.duckdb()
        counts = dict(connection.execute("SELECT word, cnt FROM word_counts").fetchall())
        assert counts == {"apple": 2, "pear": 2, "fig": 1, "kiwi": 1}
        assert sorted(snap.polars("words")["word"].to_list()) == sorted(
            snap.arrow("words").column("word").to_pylist()
        )
        cut = snap.describe()
    assert cut["level"] == "repeatable-read" and cut["epoch"] == epoch
    assert {t["table"]: t["version"] for t in cut["tables"]} == dict(snap.versions)
    assert snap.closed
    with pytest.raises(SnapshotClosedError):
        snap.arrow("words")
    with pytest.raises(Exception):  # noqa: B017 - the connection was closed with the snapshot
        connection.execute("SELECT 1")


@pytest.mark.spark
def test_snapshots_open_together_each_read_their_own_cut(wordcount):
    # Every duckdb() connection shares one DuckDB database: views and attachments of one
    # snapshot never show through another, and closing a snapshot releases its own.
    catalog = wordcount.catalog
    query = "SELECT word, cnt FROM word_counts"
    with snapshot(catalog, ["word_counts"], as_of_epoch=1) as old:
        with snapshot(catalog, ["word_counts"]) as new:
            past, present = old.duckdb(), new.duckdb()
            assert dict(past.execute(query).fetchall()) == {"apple": 2, "pear": 1}
            assert dict(present.execute(query).fetchall()) == {
                "apple": 2,
                "pear": 2,
                "fig": 1,
                "kiwi": 1,
            }
            assert old.query(query).num_rows == 2
        assert dict(past.execute(query).fetchall()) == {"apple": 2, "pear": 1}
        with pytest.raises(Exception):  # noqa: B017 - closed with its snapshot
            present.execute(query)
        names = past.execute("SELECT database_name FROM duckdb_databases()").fetchall()
        databases = {d for (d,) in names}
        assert len([d for d in databases if d.startswith("__delta_")]) == 1, databases


@pytest.mark.spark
def test_an_outside_duckdb_reads_the_cut_from_etl_snapshot(wordcount):
    """What the README shows: DuckDB, knowing nothing of Delta Barrier, reads the cut."""
    import duckdb

    from etl.reader import delta_extension_path

    result = etl(
        "snapshot",
        "word_counts",
        "cnt_counts",
        "--format",
        "json",
        "--warehouse",
        wordcount.warehouse,
        cwd=wordcount.root,
    )
    assert result.returncode == 0, result.stderr
    cut = json.loads(result.stdout)
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{delta_extension_path()}'")
    rows = {}
    for table in cut["tables"]:
        connection.execute(f"ATTACH '{table['uri']}' AS t_{table['table']} (TYPE delta)")
        rows[table["table"]] = connection.execute(
            f"SELECT count(*) FROM t_{table['table']} AT (VERSION => {table['version']})"
        ).fetchone()[0]
    with snapshot(wordcount.catalog, ["word_counts", "cnt_counts"]) as snap:
        assert cut["epoch"] == snap.epoch
        assert rows == {t: snap.arrow(t).num_rows for t in rows}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT.*\+00:00", cut["barrier_ts"])


# -- the etl command -------------------------------------------------------------------------

NO_JAVA = {"JAVA_HOME": "/nonexistent-java", "PATH": "/usr/bin:/bin"}
"""A command run with this environment fails if it tries to start a JVM."""


@pytest.mark.spark
@pytest.mark.slow
def test_etl_sql_on_duckdb_starts_no_spark_and_matches_spark(wordcount):
    query = "SELECT c.cnt, n.words, count(*) AS w FROM words w JOIN word_counts c USING (word) JOIN cnt_counts n USING (cnt) GROUP BY c.cnt, n.words"
    common = ("sql", query, "--warehouse", wordcount.warehouse, "--format", "json")
    duck = etl(*common, cwd=wordcount.root, **NO_JAVA)
    assert duck.returncode == 0, duck.stderr
    sparked = etl(*common, "--engine", "spark", cwd=wordcount.root)
    assert sparked.returncode == 0, sparked.stderr
    assert sorted(json.loads(duck.stdout), key=repr) == sorted(json.loads(sparked.stdout), key=repr)
    # Nothing on stderr but the snapshot's lines: no JVM notice, no Spark log, no UI.
    assert [line.split("=")[0] for line in sparked.stderr.splitlines()] == [
        "level",
        "barrier_ts",
    ], sparked.stderr
    with_ui = etl("--spark-ui", *common, "--engine", "spark", cwd=wordcount.root)
    assert with_ui.returncode == 0, with_ui.stderr
    assert re.search(r"^Spark UI: http://\S+:\d+$", with_ui.stderr, re.MULTILINE), with_ui.stderr


@pytest.mark.spark
def test_the_driver_jvm_keeps_its_stderr_but_not_its_boot_notice(tmp_path):
    script = (
        "import os\n"
        "os.environ['ETL_SPARK_UI'] = 'false'\n"
        "from etl.spark import build_spark\n"
        "spark = build_spark(master='local[1]')\n"
        "spark.sparkContext._jvm.System.err.println('error: said by the JVM')\n"
        "print(spark.sparkContext.uiWebUrl)\n"
    )
    done = subprocess.run(
        [os.sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"  # the UI is off when the etl command says so
    # The line the JVM wrote just before the process ended still arrives; the notice not.
    assert done.stderr.splitlines() == ["error: said by the JVM"], done.stderr


@pytest.mark.spark
def test_csv_and_json_into_a_closed_pipe_exit_quietly(wordcount):
    for fmt in ("csv", "json", "table"):
        shell = subprocess.run(
            f"{Path(os.sys.executable).with_name('etl')} sql 'SELECT w1.word FROM words w1 CROSS JOIN words w2 CROSS JOIN words w3 CROSS JOIN words w4' "
            f"--limit 100000 --format {fmt} --warehouse {wordcount.warehouse} | head -n 2",
            shell=True,
            capture_output=True,
            text=True,
            errors="replace",
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])},
        )
        assert "Traceback" not in shell.stderr and "Broken" not in shell.stderr, shell.stderr
        assert "error" not in shell.stderr.lower(), shell.stderr


READ_COMMANDS = (
    ("status",),
    ("lineage",),
    ("epochs", "words"),
    ("snapshot", "words", "--format", "json"),
    ("sql", "SELECT count(*) AS n FROM words", "--format", "csv"),
)


@pytest.mark.spark
def test_read_commands_work_on_a_read_only_warehouse(wordcount, tmp_path):
    if os.geteuid() == 0:
        _read_only_by_mount(wordcount, tmp_path)
        return
    import shutil

    copy = tmp_path / "ro"
    shutil.copytree(wordcount.warehouse, copy)
    modes = []
    for path in [copy, *copy.rglob("*")]:
        modes.append(path)
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        for args in READ_COMMANDS:
            result = etl(*args, "--warehouse", copy, cwd=tmp_path, **NO_JAVA)
            assert result.returncode == 0, (args, result.stderr)
    finally:
        for path in modes:
            if path.exists():
                path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _read_only_by_mount(wordcount, tmp_path) -> None:
    """Root writes through file permissions: the commands run in a mount namespace of
    their own where the warehouse (tables and catalog) is mounted read-only."""
    import shlex
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: cannot make the warehouse read-only")
    where = shlex.quote(str(wordcount.warehouse))
    command = shlex.quote(str(Path(os.sys.executable).with_name("etl")))
    steps = [
        f"mount --bind {where} {where}",
        f"mount -o remount,ro,bind {where}",
        f"! touch {where}/probe 2>/dev/null",  # it is read-only
    ] + [
        f"{command} {shlex.join(args)} --warehouse {where} > /dev/null || exit $?"
        for args in READ_COMMANDS
    ]
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-ec", "\n".join(steps)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3]), **NO_JAVA},
    )
    if done.returncode != 0 and "mount" in done.stderr and "permission denied" in done.stderr:
        pytest.skip(f"cannot mount read-only here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert not (wordcount.warehouse / "probe").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--warehouse", "s3://bucket/wh"),
        ("sql", "SELECT * FROM words", "--warehouse", "s3://bucket/wh"),
        (
            "run",
            REPO / "examples/wordcount/pipeline.py",
            "--once",
            "--param",
            "input_dir=.",
            "--warehouse",
            "gs://b/wh",
        ),
    ],
)
def test_a_url_warehouse_without_a_catalog_url_is_refused_before_anything_is_written(
    tmp_path, args
):
    result = etl(*args, cwd=tmp_path, **NO_JAVA)
    assert result.returncode == 2, result.stderr
    assert "needs a catalog URL" in result.stderr and "--catalog" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_read_commands_never_create_a_catalog(tmp_path):
    for args in (
        ("status", "--warehouse", "typo"),
        ("snapshot", "words", "--warehouse", "typo"),
        ("status", "--catalog", f"sqlite:///{tmp_path}/missing.sqlite"),
    ):
        result = etl(*args, cwd=tmp_path, **NO_JAVA)
        assert result.returncode == 2, result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.postgres
def test_status_against_an_empty_postgres_schema_creates_nothing(postgres_url, tmp_path):
    import sqlalchemy as sa

    result = etl("status", "--catalog", postgres_url, cwd=tmp_path, **NO_JAVA)
    assert result.returncode == 2, result.stderr
    engine = sa.create_engine(postgres_url.replace("postgresql+psycopg", "postgresql+psycopg"))
    with engine.connect() as conn:
        assert sa.inspect(conn).get_table_names() == []
    engine.dispose()


def test_an_unreachable_spark_master_is_exit_2_in_one_line(tmp_path):
    started = time.monotonic()
    result = etl(
        "run",
        "examples/wordcount/pipeline.py",
        "--once",
        "--param",
        f"input_dir={tmp_path}",
        "--warehouse",
        tmp_path / "wh",
        "--master",
        "spark://127.0.0.1:9",
        cwd=Path(__file__).parents[3],
    )
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started < 30
    assert "unreachable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


SPECIAL_PASSWORDS = ["pq7@ss9@wx1", "abq:dzf/gqi#jkv?mnz%pqy", "tqx@zsv:jqw/kxz"]


def _password_commands(url: str) -> list[tuple[str, ...]]:
    pipeline = str(Path(__file__).parents[3] / "examples" / "wordcount" / "pipeline.py")
    return [
        ("status", "--catalog", url),
        ("--log-level", "debug", "status", "--catalog", url),
        ("snapshot", "words", "--catalog", url, "--format", "json"),
        ("sql", "SELECT * FROM words", "--catalog", url),
        ("run", pipeline, "--once", "--param", "input_dir=x", "--catalog", url),
        ("config", "--catalog", url),
        ("config", "--format", "json"),
    ]


def _assert_never_printed(password: str, text: str) -> None:
    from urllib.parse import unquote

    whole = {password, unquote(password)}
    for secret in whole | {p for w in whole for p in re.split(r"[@:/%#?]", w) if len(p) >= 3}:
        assert secret not in text, (secret, text)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("password", "encode"),
    [
        (SPECIAL_PASSWORDS[0], False),
        (SPECIAL_PASSWORDS[0], True),
        (SPECIAL_PASSWORDS[1], False),
        (SPECIAL_PASSWORDS[2], True),
    ],
)
def test_a_password_with_special_characters_is_never_printed(tmp_path, password, encode):
    from urllib.parse import quote

    # A server that is up but refuses the login (no such role), in every path that prints
    # a catalog URL or a connection error: flags, the environment, config, -v log lines.
    written = quote(password, safe="") if encode else password
    url = f"postgresql://no_such_role_13:{written}@127.0.0.1:5432/test"
    for args in _password_commands(url):
        # Wide enough that no table cell is cut short (a cut cell could hide the secret).
        result = etl(*args, cwd=tmp_path, ETL_CATALOG_URL=url, COLUMNS="300", **NO_JAVA)
        text = result.stdout + result.stderr
        _assert_never_printed(password, text)
        if args[0] != "config":
            assert result.returncode == 2, (args, text)
            refused = "@" in written  # before connecting: the URL says to encode it
            assert "%40" in text if refused else "127.0.0.1:5432" in text, (args, text)
            assert len(result.stderr.strip().splitlines()) == 1, (args, text)
        else:
            assert result.returncode == 0 and "no_such_role_13:***@127.0.0.1" in text, text
    assert list(tmp_path.iterdir()) == []


def test_a_password_is_never_printed_when_the_server_is_down(tmp_path):
    password = SPECIAL_PASSWORDS[1]
    url = f"postgresql://etl:{password}@127.0.0.1:9/etl"
    for args in _password_commands(url):
        result = etl(*args, cwd=tmp_path, ETL_CATALOG_URL=url, **NO_JAVA)
        _assert_never_printed(password, result.stdout + result.stderr)
        if args[0] != "config":
            assert result.returncode == 2 and "127.0.0.1:9" in result.stderr, result.stderr


def test_config_precedence_flags_env_file_defaults(tmp_path):
    (tmp_path / "etl.toml").write_text(
        'warehouse = "wh-from-file"\nmaster = "local[3]"\nengine = "spark"\n'
        'catalog = "sqlite:///from-file.sqlite"\n'
    )
    result = etl(
        "config", "--format", "json", cwd=tmp_path, ETL_CATALOG_URL="sqlite:///from-env.sqlite"
    )
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert settings["warehouse"] == {
        "value": str(tmp_path / "wh-from-file"),
        "source": f"file {tmp_path / 'etl.toml'}",
    }
    assert settings["catalog"] == {
        "value": "sqlite:///from-env.sqlite",
        "source": "env ETL_CATALOG_URL",
    }
    assert settings["master"]["source"] == "env ETL_SPARK_MASTER"  # the test runner sets it
    assert settings["engine"]["value"] == "spark"
    assert settings["consistency"] == {"value": "repeatable-read", "source": "default"}
    flagged = etl("config", "--format", "json", "--warehouse", "elsewhere", cwd=tmp_path)
    assert json.loads(flagged.stdout)["settings"]["warehouse"]["source"] == "flag"
    # the file's settings reach every command
    status = etl("status", cwd=tmp_path, **NO_JAVA)
    assert status.returncode == 2 and "from-file.sqlite" in status.stderr
    (tmp_path / "etl.toml").write_text('warehous = "typo"\n')
    bad = etl("status", cwd=tmp_path, **NO_JAVA)
    assert bad.returncode == 2 and "unknown setting(s) warehous" in bad.stderr


def test_conventions_version_short_help_choices_and_flags(tmp_path):
    assert etl("--version", cwd=tmp_path).stdout.startswith("etl (Delta Barrier) ")
    for command in ("sql", "run", "snapshot", "config", "status"):
        result = etl(command, "-h", cwd=tmp_path, COLUMNS="200")
        assert result.returncode == 0, result.stderr
        assert not re.search(r"<(bool|str|int|float|list\[str\]|path)>", result.stdout), (
            result.stdout
        )
    sql_help = etl("sql", "-h", cwd=tmp_path, COLUMNS="200").stdout
    assert "[read-uncommitted|read-committed|repeatable-read]" in sql_help
    assert "[table|csv|json]" in sql_help and "[duckdb|spark]" in sql_help
    bad = etl("sql", "SELECT 1 FROM words", "--consistency", "serializable", cwd=tmp_path)
    assert bad.returncode == 2
    both = etl(
        "sql",
        "SELECT * FROM words",
        "--as-of-epoch",
        "1",
        "--as-of-time",
        "2025-01-01",
        "--warehouse",
        tmp_path,
        cwd=tmp_path,
    )
    assert both.returncode == 2 and "give one of --as-of-epoch, --as-of-time" in both.stderr
    assert "as_of" not in both.stderr
    # As a user types it in bash: the completion script is for the shell etl runs under
    # (found from its parent processes; "; exit" keeps bash from exec'ing into etl).
    completion = subprocess.run(
        ["bash", "-c", f"'{ETL}' --show-completion; exit $?"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completion.returncode == 0 and "complete -o" in completion.stdout, completion


def test_a_typo_in_sql_is_one_plain_line(tmp_path):
    result = etl("sql", "SELECT a * FROM words WHERE", "--warehouse", tmp_path, cwd=tmp_path)
    assert result.returncode == 2
    assert "incomplete expression" in result.stderr
    assert "<class" not in result.stderr and not ANSI.search(result.stderr)


def test_catalog_upgrade_creates_nothing_and_speaks_json(tmp_path):
    from tests.support.cli_runner import etl

    typo = tmp_path / "wherehouse"
    refused = etl("catalog", "upgrade", "--warehouse", typo, cwd=tmp_path)
    assert refused.returncode == 2 and "run" in refused.stderr
    assert not typo.exists()

    warehouse = tmp_path / "warehouse"
    load_catalog(None, warehouse=warehouse).close()
    done = etl("catalog", "upgrade", "--warehouse", warehouse, "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "schema_version_before": SCHEMA_VERSION,
        "schema_version": SCHEMA_VERSION,
    }


def _leaf_commands():
    import typer

    from etl.cli import app

    def walk(command, path):
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                yield from walk(sub, (*path, name))
        else:
            yield " ".join(path), command

    return list(walk(typer.main.get_command(app), ()))


def test_every_command_has_format_json_with_table_as_the_default():
    commands = _leaf_commands()
    assert {"run", "recover", "catalog upgrade", "resolve", "tag create"} <= dict(commands).keys()
    for name, command in commands:
        (option,) = [p for p in command.params if p.name == "format"] or [None]
        assert option is not None, f"etl {name} has no --format"
        choices = {getattr(c, "value", c) for c in option.type.choices}
        assert "json" in choices and str(option.default) == "table", (name, choices)


def test_actions_speak_json(tmp_path):
    from catalog import JobSpec, SealRequest, TableSpec

    warehouse = tmp_path / "warehouse"
    catalog = load_catalog(warehouse=warehouse)
    catalog.register_table(TableSpec("raw", str(warehouse / "raw"), kind="root"))
    catalog.register_job(JobSpec("ingest", "raw", source="words"))
    lease = catalog.acquire_lease("ingest", "me", ttl_seconds=60)
    epoch = catalog.open_epoch().id
    catalog.seal("ingest", lease.generation, [SealRequest("raw", epoch, 3)])
    catalog.release_lease(lease)
    catalog.close()

    def cli(*args: str) -> object:
        result = etl(*args, "--warehouse", warehouse, "--format", "json", cwd=tmp_path, **NO_JAVA)
        assert result.returncode == 0, (args, result.stderr)
        return json.loads(result.stdout)

    created = cli("tag", "create", "first")
    assert {k: created[k] for k in ("name", "epoch", "versions")} == {
        "name": "first",
        "epoch": epoch,
        "versions": {"raw": 3},
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+\+00:00", created["created_at"])
    assert [t["name"] for t in cli("tag", "list")] == ["first"]
    assert cli("tag", "delete", "first") == {"deleted": "first"}
    assert cli("retire", "job", "ingest") == {"job": "ingest", "retired_tables": ["raw"]}


def test_log_lines_never_carry_the_catalog_password(tmp_path):
    password = SPECIAL_PASSWORDS[2]
    url = f"postgresql://etl:{password}@db-host:5432/etl"
    script = (
        "import logging, sys\n"
        "from etl.cli.app import configure_logging\n"
        "configure_logging('DEBUG')\n"
        "logging.getLogger('etl.x').error('cannot reach %s: %s', sys.argv[1], sys.argv[2])\n"
    )
    done = subprocess.run(
        [os.sys.executable, "-c", script, url, password],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3]), "ETL_CATALOG_URL": url},
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR etl.x: cannot reach postgresql://etl:***@db-host:5432/etl: ***" in done.stderr
    _assert_never_printed(password, done.stderr)
