"""A local stand-in for the hosts released models come from, on 127.0.0.1: plain files (the
official archives' Google Cloud Storage, with its `x-goog-hash` MD5) and the Hugging Face
Hub's API as `huggingface_hub` calls it (repo info with file hashes, `resolve/` downloads
with Range). Faults to order: a file's bytes corrupted, a transfer cut halfway, a
transfer that stalls halfway; unknown paths are 404s."""

import base64
import hashlib
import http.server
import json
import os
import threading
import time

_LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".zip")


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class ModelServer:
    """Serves `files` ({"/path": bytes}) and Hub `repos` ({"org/name": {file: bytes}})."""

    def __init__(self):
        self.files, self.repos = {}, {}
        self.corrupt = set()  # URL paths whose bytes are served altered (same length)
        self.cut = {}  # URL path -> transfers still to cut off halfway
        self.stall = set()  # URL paths whose transfer sends half, then hangs
        self.redirects = {}  # URL path -> the Location it redirects to
        self.requests = []  # (method, path) of every request
        self._server = None

    # ------------------------------------------------------------------------- contents
    def add_file(self, path: str, data: bytes) -> str:
        self.files[path] = data
        return self.url + path

    def add_repo(self, repo: str, directory) -> None:
        """Serves every file under `directory` as Hub repo `repo` (subdirectories too)."""
        files = {}
        for root, _, names in os.walk(directory):
            for name in names:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, directory).replace(os.sep, "/")] = f.read()
        self.repos[repo] = files

    @staticmethod
    def commit(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    # ------------------------------------------------------------------------- running
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self, port: int = 0) -> "ModelServer":
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------------- answers
    def _repo_info(self, repo: str) -> dict:
        siblings = []
        for name, data in sorted(self.repos[repo].items()):
            sibling = {"rfilename": name, "size": len(data), "blobId": _git_blob_sha1(data)}
            if name.endswith(_LFS_SUFFIXES):
                sibling["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(),
                                  "size": len(data), "pointerSize": 134}
            siblings.append(sibling)
        return {"id": repo, "modelId": repo, "sha": self.commit(repo), "private": False,
                "siblings": siblings}

    def _lookup(self, path: str):
        """(bytes, extra headers) for a download path, or None."""
        if path in self.files:
            data = self.files[path]
            md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
            return data, {"x-goog-hash": f"crc32c=AAAAAA==,md5={md5}"}
        parts = path.lstrip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, name = "/".join(parts[:2]), "/".join(parts[4:])
            if repo in self.repos and name in self.repos[repo] and parts[3] in (
                    "main", self.commit(repo)):
                data = self.repos[repo][name]
                etag = (hashlib.sha256(data).hexdigest() if name.endswith(_LFS_SUFFIXES)
                        else _git_blob_sha1(data))
                return data, {"X-Repo-Commit": self.commit(repo), "ETag": f'"{etag}"'}
        return None


def _handler(server: ModelServer):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _path(self) -> str:
            return self.path.split("?")[0]

        def _not_found(self, code="EntryNotFound"):
            self.send_response(404)
            self.send_header("X-Error-Code", code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            self._answer(body=False)

        def do_GET(self):
            try:
                self._answer(body=True)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a client killed mid-download (tests do it on purpose)

        def _answer(self, body: bool):
            path = self._path()
            server.requests.append((self.command, path))
            if path in server.redirects:
                self.send_response(302)
                self.send_header("Location", server.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if path.startswith("/api/models/"):
                repo = "/".join(path[len("/api/models/"):].split("/")[:2])
                if repo not in server.repos:
                    return self._not_found("RepoNotFound")
                payload = json.dumps(server._repo_info(repo)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            found = server._lookup(path)
            if found is None:
                return self._not_found()
            data, headers = found
            if path in server.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start = 0
            requested = self.headers.get("Range", "")
            if requested.startswith("bytes=") and requested.endswith("-"):
                start = int(requested[len("bytes="):-1])
            self.send_response(206 if start else 200)
            for key, value in headers.items():
                self.send_header(key, value)
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            if not body:
                return
            data = data[start:]
            if path in server.stall:
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                time.sleep(3600)
            elif server.cut.get(path, 0) > 0:
                server.cut[path] -= 1
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
            else:
                self.wfile.write(data)

    return Handler
