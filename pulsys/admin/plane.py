"""The admin plane's state for one pulsys, in two parts that app.py builds in order:

    plane = AdminPlane(config)     # opens and migrates the store (raises DatabaseError), keys,
                                   # the key Gate (plane.data_gate: what reactors check, or None
                                   # with --auth off); plane.make_first_key() once every socket is bound
    cache = CachePlane(plane.db, index, store, space, ...)   # once the upstream plane exists:
                                   # per-repo downloads, the stats saver, the throughput
                                   # history's sampler, pre-warm jobs, purge
    api = AdminApi(plane.keys, plane.gate, plane.sync, cache, vars_fn)   # admin/api.py
    plane.start(publish); cache.start()      # publish(table, generation): key changes to workers
    cache.history.stop()           # while the counters can still be read
    cache.stop_jobs() ... cache.stop(); plane.stop()
"""

from pulsys.admin.cache_view import CacheView
from pulsys.admin.history import SAMPLE_INTERVAL, HistorySampler
from pulsys.admin.prewarm import PrewarmRunner
from pulsys.admin.repo_stats import RepoStatsSaver
from pulsys.cache.downloads import Downloads
from pulsys.admin.keys import KeyService
from pulsys.admin.keysync import KeySync
from pulsys.admin.token_secret import open_sealer
from pulsys.auth.gate import Gate
from pulsys.db.database import Database, describe
from pulsys.db.migrate import migrate


class AdminPlane:
    """The store, the keys and the Gate they load into."""

    def __init__(self, config):
        self.db = Database.open(config.db)
        try:
            self.migrated = migrate(self.db)
            # keys that carry their owner's Hub token (ADR 0017): sealed with this secret
            self.keys_carry_tokens = config.upstream_auth == "client" and config.auth == "required"
            self.keys = KeyService(self.db, sealer=open_sealer(config.token_secret_file, self.keys_carry_tokens))
            self.auth_required = config.auth == "required"
            self.first_key = None   # made by make_first_key, once the server listens
            self.gate = Gate()
            self.sync = KeySync(self.keys, self.gate)
            self.sync.refresh(force=True)
        except BaseException:
            self.db.close()
            raise
        self.data_gate = self.gate if config.auth == "required" else None
        self.db_description = describe(config.db)

    def make_first_key(self):
        """On a store that never had a key, with --auth required: create the admin key
        (-> self.first_key) and load it at once, into the Gate and, through the sync's
        publish, the workers. Called after every socket is bound: a first start that
        fails before (a port in use) leaves no key behind, so the next start makes and
        shows one (before, it made the key first and the failed start lost it: the next
        start saw a key and showed none)."""
        if self.auth_required and self.first_key is None:
            self.first_key = self.keys.ensure_first_key()
            if self.first_key:
                self.sync.refresh()
        return self.first_key

    def start(self, publish=None):
        """Keep the Gate in step with the store; `publish(table, generation)` also sends each
        new key table to the workers (first the current one)."""
        if publish is not None:
            gen = self.sync.generation      # read before the table: never newer than it
            publish(self.gate.table, gen)
        self.sync.start(publish)
        return self

    def stop(self):
        self.sync.stop()
        self.db.close()


class CachePlane:
    """The admin's side of the cache, for the process that owns the upstream plane: the
    per-repo downloads and their saver, the throughput history (sampled from
    `counter_lists()`, the counters /debug/vars sums, every `history_interval` seconds),
    pre-warm jobs (run through the fill pool's `submit`, at most `parallel` files at a
    time) and the cache view (repos, purge).
    `downloads_source`: what the reactors of this process counted per repo."""

    def __init__(self, db, index, store, space, drop_fds, submit, worker, parallel, log,
                 downloads_source=None, counter_lists=list, history_interval=SAMPLE_INTERVAL):
        self.downloads = Downloads(downloads_source)
        self.stats_saver = RepoStatsSaver(db, self.downloads, log)
        self.stats_saver.load()
        self.history = HistorySampler(db, counter_lists, log, history_interval)
        self.prewarm = PrewarmRunner(db, submit, worker, parallel, log)
        self.view = CacheView(index, store, space, drop_fds, log)

    def start(self):
        self.stats_saver.start()
        self.history.start()
        self.prewarm.start()
        return self

    def stop_jobs(self):
        """Before the fill pool stops: a running job stays `running` in the store and
        resumes at the next start."""
        self.prewarm.stop()

    def stop(self):
        self.stop_jobs()
        self.history.stop()
        self.stats_saver.stop()


def first_start_banner(key, endpoint):
    """What a first start prints on stdout: the only time the key is shown."""
    return ("\n"
            "pulsys: first start: created an API key with scope admin. It is shown only now;\n"
            "pulsys: keep it somewhere safe. Clients use it as their Hugging Face token:\n"
            "\n"
            "export HF_ENDPOINT=%s\n"
            "export HF_TOKEN=%s\n"
            "\n"
            "pulsys: more keys: `pulsys keys create --scope read` (see docs/admin.md)\n\n" % (endpoint, key))
