"""`hetpool db upgrade | current | backup | restore` and `hetpool config check`.

They work on the database directly (no server needed). SQLite backups use sqlite3's
online backup API, which copies a consistent snapshot page by page while the server keeps
writing (WAL mode); PostgreSQL backups run pg_dump / pg_restore in the custom format.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import typer

from hetpool.cli.render import console, err_console

db_app = typer.Typer(no_args_is_help=True, help="Database schema, backup and restore (run where the database is reachable).")
config_app = typer.Typer(no_args_is_help=True, help="The server's configuration (file + HETPOOL_* environment).")

ConfigOpt = typer.Option(None, "--config", envvar="HETPOOL_CONFIG", help="YAML settings file (see docs/operations.md)")
DataDirOpt = typer.Option(None, "--data-dir", help="default: the config file, HETPOOL_DATA_DIR or ~/.hetpool")
UrlOpt = typer.Option(None, "--database-url", help="default: the config file, HETPOOL_DATABASE_URL or SQLite in the data dir")
URL_FORMS = "sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB"


def fail(message: str, code: int = 2) -> None:
    err_console.print(f"[red]error[/red]: {message}", highlight=False)
    raise typer.Exit(code)


def _settings(config: Path | None, data_dir: Path | None, database_url: str | None):
    from hetpool.server.config_file import ConfigError, load_settings

    try:
        return load_settings(config, {"data_dir": data_dir, "database_url": database_url})
    except ConfigError as exc:
        fail(str(exc))


def _engine(url: str):
    """An engine that has connected once, or a clear error naming --database-url."""
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError

    from hetpool.server.config_file import mask_url
    from hetpool.server.db.session import make_engine

    try:
        engine = make_engine(url)
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        fail(f"--database-url {mask_url(url)!s}: not a database URL ({exc.__class__.__name__}: {exc}); expected {URL_FORMS}")
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).parent.is_dir():
        fail(f"--database-url {url}: directory {Path(url.removeprefix('sqlite:///')).parent} does not exist")
    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        fail(f"--database-url {mask_url(url)}: cannot connect: {str(exc.orig).strip().splitlines()[0]}", code=1)
    return engine


def revisions(engine) -> tuple[list[str], list[str]]:
    """(revisions the database is at, head revisions of this hetpool)."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    from hetpool.server.db.session import alembic_config

    with engine.connect() as conn:
        current = sorted(MigrationContext.configure(conn).get_current_heads())
    heads = sorted(ScriptDirectory.from_config(alembic_config()).get_heads())
    return current, heads


def _fmt(revs: list[str]) -> str:
    return ", ".join(revs) if revs else "(empty database)"


def upgrade(config: Path | None = ConfigOpt, data_dir: Path | None = DataDirOpt, database_url: str | None = UrlOpt) -> None:
    """Apply all pending migrations (Alembic, to every head); safe to run again."""
    from hetpool.core.errors import HetpoolError
    from hetpool.server.config_file import mask_url
    from hetpool.server.db.session import migrate

    settings = _settings(config, data_dir, database_url)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    url = settings.resolved_database_url()
    engine = _engine(url)
    before, heads = revisions(engine)
    console.print(f"database {mask_url(url)}", highlight=False)
    console.print(f"before: {_fmt(before)}", highlight=False)
    try:
        migrate(engine)
    except HetpoolError as exc:  # a migration that refuses to run says what to fix
        engine.dispose()
        fail(exc.message)
    after, _ = revisions(engine)
    console.print(f"after:  {_fmt(after)}", highlight=False)
    console.print("already up to date" if before == after else f"upgraded to {len(heads)} head(s)")
    engine.dispose()


def current(
    config: Path | None = ConfigOpt,
    data_dir: Path | None = DataDirOpt,
    database_url: str | None = UrlOpt,
    check: bool = typer.Option(False, "--check", help="exit 3 if migrations are pending (for deploy scripts)"),
) -> None:
    """Print the database's schema revisions and whether `hetpool db upgrade` is needed."""
    settings = _settings(config, data_dir, database_url)
    engine = _engine(settings.resolved_database_url())
    now, heads = revisions(engine)
    engine.dispose()
    console.print(f"current: {_fmt(now)}", highlight=False)
    console.print(f"heads:   {_fmt(heads)}", highlight=False)
    pending = set(now) != set(heads)
    console.print("pending migrations: run `hetpool db upgrade`" if pending else "up to date")
    if pending and check:
        raise typer.Exit(3)


def _sqlite_path(url: str) -> Path | None:
    return Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None


def _pg_url(url: str) -> str:
    """libpq wants postgresql://, without SQLAlchemy's +driver."""
    scheme, rest = url.split("://", 1)
    return "postgresql://" + rest if scheme.startswith("postgres") else url


def sqlite_copy(source: Path, target: Path) -> None:
    """Online, consistent copy via sqlite3's backup API (readers and the WAL writer keep going)."""
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst, pages=1024)  # in steps, so the server's writers are not blocked for the whole copy
        check = dst.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise RuntimeError(f"integrity check of {target} failed: {check}")
    finally:
        dst.close()
        src.close()


def _task_count(path: Path) -> int | None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM tasks").fetchone()[0]
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def backup(
    out: Path = typer.Option(..., "--out", help="backup file to write (SQLite: a database file; PostgreSQL: pg_dump custom format)"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing file"),
    config: Path | None = ConfigOpt,
    data_dir: Path | None = DataDirOpt,
    database_url: str | None = UrlOpt,
) -> None:
    """Back up the database while the server runs."""
    settings = _settings(config, data_dir, database_url)
    url = settings.resolved_database_url()
    if out.exists() and not force:
        fail(f"--out {out}: already exists (pass --force to overwrite)")
    if not out.parent.is_dir():
        fail(f"--out {out}: directory {out.parent} does not exist")
    source = _sqlite_path(url)
    if source is not None:
        if not source.is_file():
            fail(f"--database-url {url}: no database file at {source}")
        tmp = out.with_name(out.name + ".partial")
        tmp.unlink(missing_ok=True)
        sqlite_copy(source, tmp)
        tmp.replace(out)  # never leave a half-written file under the final name
        console.print(f"backed up {source} to {out} ({out.stat().st_size} bytes, {_task_count(out)} tasks)", highlight=False)
        return
    if url.startswith("postgres"):
        _run_pg("pg_dump", ["--format=custom", "--no-owner", f"--file={out}", _pg_url(url)], f"pg_dump --format=custom --no-owner --file={out} URL")
        console.print(f"backed up with pg_dump to {out} ({out.stat().st_size} bytes)", highlight=False)
        return
    fail(f"--database-url: backup supports SQLite and PostgreSQL URLs; expected {URL_FORMS}")


def restore(
    source: Path = typer.Option(..., "--from", help="backup file written by `hetpool db backup`"),
    force: bool = typer.Option(False, "--force", help="replace an existing database (stop the server first)"),
    config: Path | None = ConfigOpt,
    data_dir: Path | None = DataDirOpt,
    database_url: str | None = UrlOpt,
) -> None:
    """Restore a backup into the configured database; the server must be stopped."""
    settings = _settings(config, data_dir, database_url)
    url = settings.resolved_database_url()
    if not source.is_file():
        fail(f"--from {source}: no such file")
    target = _sqlite_path(url)
    if target is not None:
        if _task_count(source) is None:
            fail(f"--from {source}: not a hetpool SQLite backup (no tasks table)")
        if target.exists() and target.stat().st_size > 0 and not force:
            fail(f"--database-url {url}: {target} already exists (stop the server and pass --force to replace it)")
        target.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("-wal", "-shm"):  # a stale WAL from the old database must not be replayed onto the restored one
            Path(f"{target}{suffix}").unlink(missing_ok=True)
        sqlite_copy(source, target)
        console.print(f"restored {source} to {target} ({_task_count(target)} tasks); run `hetpool db upgrade` if this hetpool is newer")
        return
    if url.startswith("postgres"):
        args = ["--no-owner", "--exit-on-error", f"--dbname={_pg_url(url)}", str(source)]
        if force:
            args = ["--clean", "--if-exists", *args]
        _run_pg("pg_restore", args, f"pg_restore {' '.join(a for a in args if not a.startswith('--dbname'))} --dbname=URL")
        console.print(f"restored {source} with pg_restore")
        return
    fail(f"--database-url: restore supports SQLite and PostgreSQL URLs; expected {URL_FORMS}")


def _run_pg(tool: str, args: list[str], shown: str) -> None:
    """Run pg_dump / pg_restore; the URL (with its password) is never printed."""
    exe = shutil.which(tool)
    if not exe:
        fail(f"{tool} is not on PATH; install the PostgreSQL client tools, or run by hand: {shown} (docs/operations.md)", code=1)
    result = subprocess.run([exe, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        fail(f"{tool} failed ({result.returncode}): {result.stderr.strip()[-2000:]}", code=1)


def config_check(
    config: Path | None = ConfigOpt,
    data_dir: Path | None = DataDirOpt,
    database_url: str | None = UrlOpt,
) -> None:
    """Validate the configuration and print the effective settings (secrets masked)."""
    from hetpool.server.config_file import effective_settings

    settings = _settings(config, data_dir, database_url)
    if settings.oidc_issuer and not settings.oidc_audience:
        fail("oidc_audience: required when oidc_issuer is set")
    width = max(len(k) for k in type(settings).model_fields)
    for key, value in effective_settings(settings).items():
        console.print(f"{key:<{width}}  {value}", highlight=False, markup=False)
    err_console.print("configuration ok")


def register(app: typer.Typer) -> None:
    db_app.command("upgrade")(upgrade)
    db_app.command("current")(current)
    db_app.command("backup")(backup)
    db_app.command("restore")(restore)
    config_app.command("check")(config_check)
    app.add_typer(db_app, name="db")
    app.add_typer(config_app, name="config")
