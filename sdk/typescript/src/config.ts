// How the SDK finds a Kibotos deployment, the way every Kibotos client does
// (internal/clientconfig): the client configuration `kibotos dev` writes,
// $KIBOTOS_CONFIG or $KIBOTOS_HOME/config.env (~/.kibotos/config.env), then
// the same variables in the environment, which win.
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** The variables the SDK reads: the Native Workspace endpoint and its API key. */
export const ENV_WORKSPACE_ENDPOINT = "KIBOTOS_WORKSPACE_ENDPOINT";
export const ENV_TOKEN = "KIBOTOS_TOKEN";

/** Where a client finds a deployment; either may be missing. */
export interface ClientConfig {
  baseUrl?: string;
  apiKey?: string;
}

/** configPath is $KIBOTOS_CONFIG, else $KIBOTOS_HOME/config.env, else ~/.kibotos/config.env. */
export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.KIBOTOS_CONFIG) return env.KIBOTOS_CONFIG;
  return join(env.KIBOTOS_HOME || join(homedir(), ".kibotos"), "config.env");
}

/**
 * loadConfig reads the configuration file (a missing one is empty), then
 * applies the environment.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env, path = configPath(env)): ClientConfig {
  let values: Record<string, string> = {};
  try {
    values = parseEnvFile(readFileSync(path, "utf8"), path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const pick = (k: string) => (env[k] !== undefined ? env[k] : values[k]);
  return { baseUrl: pick(ENV_WORKSPACE_ENDPOINT) || undefined, apiKey: pick(ENV_TOKEN) || undefined };
}

/**
 * parseEnvFile reads the subset of shell env files clientconfig writes:
 * KEY=VALUE lines, blank lines, # comments, an optional `export `, values
 * optionally quoted ('\'' inside single quotes is a quote).
 */
export function parseEnvFile(text: string, path = "config"): Record<string, string> {
  const out: Record<string, string> = {};
  text.split("\n").forEach((raw, i) => {
    let line = raw.trim();
    if (line === "" || line.startsWith("#")) return;
    if (line.startsWith("export ")) line = line.slice("export ".length);
    const eq = line.indexOf("=");
    if (eq < 0) throw new Error(`${path}:${i + 1}: want KEY=VALUE`);
    out[line.slice(0, eq).trim()] = unquote(line.slice(eq + 1).trim());
  });
  return out;
}

function unquote(v: string): string {
  const q = v[0];
  if (v.length >= 2 && (q === "'" || q === '"') && v[v.length - 1] === q) {
    return v.slice(1, -1).replaceAll("'\\''", "'");
  }
  return v;
}
