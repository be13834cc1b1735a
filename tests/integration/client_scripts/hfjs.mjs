// @huggingface/hub (huggingface.js) against HF_ENDPOINT, given as `hubUrl` as its users
// give it; prints one JSON document. Runs under Node.js with the package installed by
// tests/integration/jsclient.py (HFJS_MODULE: the path of its dist/index.mjs).
//
//   hfjs.mjs download REPO PATH   -> {"sha256", "size"} or {"missing": true} (downloadFile's null)
//   hfjs.mjs list REPO            -> {"files": [...]} (listFiles, recursive)
//   REPO is org/name, or datasets/org/name for a dataset.
import { createHash } from "node:crypto";
import { pathToFileURL } from "node:url";

const hub = await import(pathToFileURL(process.env.HFJS_MODULE).href);
const [cmd, repoArg, path] = process.argv.slice(2);
const hubUrl = process.env.HF_ENDPOINT;
const accessToken = process.env.HF_TOKEN || undefined;
const repo = repoArg.startsWith("datasets/")
  ? { type: "dataset", name: repoArg.slice("datasets/".length) }
  : { type: "model", name: repoArg };
const out = (doc) => process.stdout.write(JSON.stringify(doc) + "\n");

try {
  if (cmd === "download") {
    const blob = await hub.downloadFile({ repo, path, hubUrl, accessToken });
    if (blob === null) {
      out({ missing: true });
    } else {
      const buf = Buffer.from(await blob.arrayBuffer());
      out({ sha256: createHash("sha256").update(buf).digest("hex"), size: buf.length });
    }
  } else if (cmd === "list") {
    const files = [];
    for await (const f of hub.listFiles({ repo, hubUrl, accessToken, recursive: true })) {
      if (f.type === "file") files.push(f.path);
    }
    out({ files: files.sort() });
  } else {
    throw new Error("unknown command " + cmd);
  }
} catch (e) {
  out({ error: e.name, status: e.statusCode ?? null, message: String(e.message) });
  process.exitCode = 2;
}
