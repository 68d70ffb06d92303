// The program the READMEs show is examples/quickstart.ts, byte for byte,
// and it runs: against the `kibotos dev` the client configuration names,
// as the other tests here.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const at = (path: string) => fileURLToPath(new URL(path, import.meta.url)); // from dist/test/
const program = readFileSync(at("../../examples/quickstart.ts"), "utf8");

/** tsBlocks are the ```ts blocks of a Markdown file. */
function tsBlocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
}

test("the README's TypeScript program is examples/quickstart.ts, ten lines at most", () => {
  for (const readme of ["../../../../README.md", "../../README.md"]) {
    assert.ok(tsBlocks(readFileSync(at(readme), "utf8")).includes(program), `${readme} does not show examples/quickstart.ts as it is`);
  }
  assert.ok(program.trimEnd().split("\n").length <= 10, "longer than ten lines");
});

test("the README's TypeScript program runs", async () => {
  const run = await promisify(execFile)(process.execPath, [at("../examples/quickstart.js")], { timeout: 300_000 }).catch(
    (err: Error & { stdout?: string; stderr?: string }) => assert.fail(`${err.message}\nstdout: ${err.stdout}\nstderr: ${err.stderr}`),
  );
  assert.match(run.stdout, /^0 hello from ws-[0-9a-f]+\nhi from TypeScript\n\n$/);
});
