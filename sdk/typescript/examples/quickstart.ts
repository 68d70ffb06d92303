import { Kibotos } from "@kibotos/sdk";

const kibotos = new Kibotos(); // finds `kibotos dev`: its config.env, or KIBOTOS_WORKSPACE_ENDPOINT and KIBOTOS_TOKEN
const ws = await kibotos.workspaces.create({ template: "busybox", memory: "512Mi" }); // waits until AVAILABLE
const run = await ws.exec(["sh", "-c", "echo hello from $(hostname)"]);
console.log(run.exitCode, run.stdout.trim());
await ws.files.write("/tmp/greeting.txt", "hi from TypeScript\n");
console.log(await ws.files.read("/tmp/greeting.txt"));
await ws.delete();
