// Files in a Workspace's guest. File calls are not commands (ctrl records
// nothing for them): a retry repeats the effect, so only the calls whose
// repeat is harmless are retried: reads, listings, a write that replaces
// the file (the guest renames a complete temporary file into place), a
// delete that allows a missing path. An append, an exclusive create or a
// delete that must find its path is sent once.
import { Code, ConnectError } from "@connectrpc/connect";
import type { FileEvent, FileInfo, WatchDirectoryResponse } from "./gen/kibotos/ctrl/v1/file_pb.js";
import type { Api } from "./api.js";
import { toError } from "./errors.js";

/** WriteFile's data messages: the API takes up to 1 MiB; the CLI's cp sends 512 KiB. */
const chunkBytes = 512 << 10;

/** Who a file call acts as: a guest user, a name or uid; default the template's. */
export interface UserOptions {
  user?: string;
  signal?: AbortSignal;
}

export interface WriteOptions extends UserOptions {
  /** Permission bits of a new file; default 0644. */
  mode?: number;
  /** Make missing parent directories. */
  createParents?: boolean;
  /** Append instead of replacing. */
  append?: boolean;
  /** Fail (already_exists) when the path exists. */
  exclusive?: boolean;
}

export interface ReadOptions extends UserOptions {
  /** The first byte to read. */
  offset?: number;
  /** How many bytes at most; default to the end. */
  length?: number;
}

export interface ListOptions extends UserOptions {
  /** How many levels down to list; default 1 (the directory's own entries). */
  depth?: number;
}

/** Files is `ws.files`: the guest's filesystem. */
export class Files {
  constructor(private readonly api: Api, private readonly workspaceId: string) {}

  /** write makes path hold data (a string is written as UTF-8) and returns its metadata. */
  async write(path: string, data: string | Uint8Array, opts: WriteOptions = {}): Promise<FileInfo> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const workspaceId = this.workspaceId;
    const header = {
      path, mode: opts.mode ?? 0, createParents: opts.createParents ?? false, append: opts.append ?? false,
      exclusive: opts.exclusive ?? false, sizeBytes: BigInt(bytes.length), user: opts.user ?? "",
    };
    async function* frames() {
      yield { workspaceId, frame: { case: "header" as const, value: header } };
      for (let at = 0; at < bytes.length; at += chunkBytes) {
        yield { workspaceId, frame: { case: "data" as const, value: bytes.subarray(at, at + chunkBytes) } };
      }
    }
    const send = () => this.api.files.writeFile(frames(), { signal: opts.signal });
    const res = await this.api.call(send, opts.signal, !opts.append && !opts.exclusive);
    return res.info!;
  }

  /** read returns a file's bytes decoded as UTF-8. */
  async read(path: string, opts: ReadOptions = {}): Promise<string> {
    return Buffer.from(await this.readBytes(path, opts)).toString("utf8");
  }

  /** readBytes returns a file's bytes. */
  async readBytes(path: string, opts: ReadOptions = {}): Promise<Uint8Array> {
    return this.api.call(async () => {
      const chunks: Uint8Array[] = [];
      const req = { workspaceId: this.workspaceId, path, offset: BigInt(opts.offset ?? 0), length: BigInt(opts.length ?? 0), user: opts.user ?? "" };
      for await (const res of this.api.files.readFile(req, { signal: opts.signal })) chunks.push(res.data);
      return Buffer.concat(chunks);
    }, opts.signal);
  }

  /** list returns a directory's entries, sorted by path (all pages). */
  async list(path: string, opts: ListOptions = {}): Promise<FileInfo[]> {
    const req = { workspaceId: this.workspaceId, path, depth: opts.depth ?? 1, user: opts.user ?? "" };
    return this.api.everyPage(
      (pageToken) => this.api.files.listDirectory({ ...req, pageToken }, { signal: opts.signal }),
      (res) => res.entries,
      opts.signal,
    );
  }

  /** stat returns one path's metadata (of a symbolic link itself unless followSymlinks). */
  async stat(path: string, opts: UserOptions & { followSymlinks?: boolean } = {}): Promise<FileInfo> {
    const req = { workspaceId: this.workspaceId, path, followSymlinks: opts.followSymlinks ?? false, user: opts.user ?? "" };
    const res = await this.api.call(() => this.api.files.statFile(req, { signal: opts.signal }), opts.signal);
    return res.info!;
  }

  /** mkdir makes a directory (mode default 0755); with createParents its missing parents too, and an existing directory is no error (mkdir -p). Sent once. */
  async mkdir(path: string, opts: UserOptions & { mode?: number; createParents?: boolean } = {}): Promise<FileInfo> {
    const req = { workspaceId: this.workspaceId, path, mode: opts.mode ?? 0, createParents: opts.createParents ?? false, user: opts.user ?? "" };
    const res = await this.api.call(() => this.api.files.makeDirectory(req, { signal: opts.signal }), opts.signal, false);
    return res.info!;
  }

  /**
   * move renames source to destination (a file or a directory): one atomic
   * rename within a filesystem; across them (/tmp to the Volume) a copy,
   * then the source deleted, as mv does. An existing destination is
   * already_exists unless overwrite. Sent once: a repeat would not find the
   * source.
   */
  async move(source: string, destination: string, opts: UserOptions & { overwrite?: boolean; createParents?: boolean } = {}): Promise<FileInfo> {
    const req = {
      workspaceId: this.workspaceId, sourcePath: source, destinationPath: destination,
      overwrite: opts.overwrite ?? false, createParents: opts.createParents ?? false, user: opts.user ?? "",
    };
    const res = await this.api.call(() => this.api.files.moveFile(req, { signal: opts.signal }), opts.signal, false);
    return res.info!;
  }

  /**
   * watch watches a directory (recursive: and every one below it, new ones
   * too) and resolves once the watch is in place, so every change made
   * after it resolved is seen. Iterate the Watch (for await) for the API's
   * FileEvent messages (kind, path, newPath for a rename, type); an
   * OVERFLOW event says events were lost (list again). It ends when the
   * watched directory goes, at close(), or when opts.signal aborts.
   */
  async watch(path: string, opts: UserOptions & { recursive?: boolean } = {}): Promise<Watch> {
    // close() or the caller's signal ends the stream (Node 18 has no AbortSignal.any).
    const stop = new AbortController();
    if (opts.signal?.aborted) stop.abort();
    opts.signal?.addEventListener("abort", () => stop.abort(), { once: true });
    const signal = stop.signal;
    const req = { workspaceId: this.workspaceId, path, recursive: opts.recursive ?? false, user: opts.user ?? "" };
    const stream = this.api.files.watchDirectory(req, { signal })[Symbol.asyncIterator]();
    let first: IteratorResult<WatchDirectoryResponse>;
    try {
      first = await stream.next();
    } catch (err) {
      throw toError(err);
    }
    if (first.done || first.value.item.case !== "started") {
      stop.abort();
      throw new Error(`watch ${path}: the stream began with ${first.done ? "its end" : first.value.item.case}, not started`);
    }
    return new Watch(stream, stop);
  }

  /** remove deletes a path (a directory with its contents when recursive) and says whether there was one; a missing path is not_found unless allowMissing. */
  async remove(path: string, opts: UserOptions & { recursive?: boolean; allowMissing?: boolean } = {}): Promise<boolean> {
    const req = { workspaceId: this.workspaceId, path, recursive: opts.recursive ?? false, allowMissing: opts.allowMissing ?? false, user: opts.user ?? "" };
    // A repeat of a delete that went through is not_found, unless allowMissing.
    const res = await this.api.call(() => this.api.files.deleteFile(req, { signal: opts.signal }), opts.signal, req.allowMissing);
    return res.deleted;
  }
}

/** Watch is a directory watch (Files.watch): `for await` its FileEvents; close() ends it. */
export class Watch implements AsyncIterable<FileEvent> {
  private closed = false;

  constructor(
    private readonly stream: AsyncIterator<WatchDirectoryResponse>,
    private readonly stop: AbortController,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<FileEvent, void, undefined> {
    try {
      for (;;) {
        const next = await this.stream.next();
        if (next.done) return;
        if (next.value.item.case === "event") yield next.value.item.value;
      }
    } catch (err) {
      if (this.closed && err instanceof ConnectError && err.code === Code.Canceled) return;
      throw toError(err);
    } finally {
      this.close();
    }
  }

  /** close ends the watch; iteration ends without an error. */
  close(): void {
    this.closed = true;
    this.stop.abort();
  }
}
