import { Kibotos } from "@kibotos/sdk";

const kibotos = new Kibotos(); // finds `kibotos dev` as the CLI does: its config.env, or KIBOTOS_* variables
const ws = await kibotos.workspaces.create({ template: "busybox", memory: "512Mi" }); // waits until AVAILABLE
const run = await ws.exec(["sh", "-c", "echo hello from $(hostname)"]);
console.log(run.exitCode, run.stdout.trim());
await ws.files.write("/tmp/greeting.txt", "hi from TypeScript\n");
console.log(await ws.files.read("/tmp/greeting.txt"));
await ws.delete();
