"""The admin plane's state for one pulsys: the store (migrated at open), keys, the key
Gate and its refresher, the JSON API. app.py builds one and wires it:

    plane = AdminPlane(config)          # opens and migrates the store; raises DatabaseError
    plane.first_key                     # set once, on a first start with --auth required
    plane.data_gate                     # the Gate reactors check, or None with --auth off
    plane.start(publish)                # publish(table): send key changes to workers
    plane.stop()
"""

from pulsys.admin.api import AdminApi
from pulsys.admin.cache_view import CacheView
from pulsys.admin.jobs_api import JOB_ROUTES
from pulsys.admin.prewarm import PrewarmRunner
from pulsys.admin.repo_stats import RepoStatsSaver
from pulsys.admin.stats_api import STATS_ROUTES
from pulsys.cache.downloads import Downloads
from pulsys.admin.keys import KeyService
from pulsys.admin.keysync import KeySync
from pulsys.auth.gate import Gate
from pulsys.db.database import Database, describe
from pulsys.db.migrate import migrate


class AdminPlane:
    def __init__(self, config):
        self.db = Database.open(config.db)
        try:
            self.migrated = migrate(self.db)
            self.keys = KeyService(self.db)
            self.first_key = self.keys.ensure_first_key() if config.auth == "required" else None
            self.gate = Gate()
            self.sync = KeySync(self.keys, self.gate)
            self.sync.refresh(force=True)
        except BaseException:
            self.db.close()
            raise
        self.data_gate = self.gate if config.auth == "required" else None
        self.api = AdminApi(self.keys, self.gate, self.sync)
        self.db_description = describe(config.db)

    prewarm = None       # admin.prewarm.PrewarmRunner, after attach_cache
    stats_saver = None

    def attach_cache(self, index, store, space, drop_fds, submit, vars_fn, worker, parallel, log,
                     downloads_source=None):
        """The cache routes (stats, repos, purge, pre-warm jobs), for the process that owns
        the upstream plane. `submit`: the fill pool's; `vars_fn`: the /debug/vars snapshot;
        `downloads_source`: what the reactors of this process counted per repo."""
        self.downloads = Downloads(downloads_source)
        self.stats_saver = RepoStatsSaver(self.db, self.downloads, log)
        self.stats_saver.load()
        self.prewarm = PrewarmRunner(self.db, submit, worker, parallel, log)
        api = self.api
        api.cache = CacheView(index, store, space, drop_fds, log)
        api.downloads, api.vars_fn, api.prewarm = self.downloads, vars_fn, self.prewarm
        api.routes.extend(STATS_ROUTES + JOB_ROUTES)
        return self.downloads

    def start(self, publish=None):
        self.sync.publish = publish
        if publish is not None:
            publish(self.gate.table)
        self.sync.start()
        if self.prewarm is not None:
            self.stats_saver.start()
            self.prewarm.start()
        return self

    def stop_jobs(self):
        """Before the fill pool stops: a running job stays `running` in the store and
        resumes at the next start."""
        if self.prewarm is not None:
            self.prewarm.stop()

    def stop(self):
        self.stop_jobs()
        if self.stats_saver is not None:
            self.stats_saver.stop()
        self.sync.stop()
        self.db.close()


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
