// Read whole arrays with zarrita (npm), for the Python tests (tests/python/zm_zarrita.py).
//
//   node zarrita_read.mjs ROOT FORMAT PATH...
//   node zarrita_read.mjs --codecs        the codec ids zarrita's registry knows, as JSON
//
// ROOT: a directory (FileSystemStore), or an http(s):// URL read with zarrita's FetchStore.
// FORMAT: v2, v3 or auto (zarrita's own detection). Prints one JSON object:
// {"zarrita": VERSION, "results": {PATH: {"ok": true, "shape": [...], "dtype": "...",
// "values": [...]} | {"ok": false, "error": "..."}}}; values in C order, 64-bit integers as
// strings, non-finite floats as "NaN" / "Infinity" / "-Infinity", bytes as arrays of numbers.
// Every path is read even when others fail; the exit status is 0 unless the arguments are wrong.
import { readFileSync } from "node:fs";
import FetchStore from "@zarrita/storage/fetch";
import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

const OPENERS = { v2: zarr.open.v2, v3: zarr.open.v3, auto: zarr.open };

function plain(v) {
	if (typeof v === "bigint") return v.toString();
	if (typeof v === "number" && !Number.isFinite(v)) return String(v);
	if (v instanceof Uint8Array) return Array.from(v);
	return v;
}

async function read(root, open, path) {
	const arr = await open(root.resolve(path), { kind: "array" });
	const got = await zarr.get(arr);
	if (arr.shape.length === 0) {
		return { ok: true, shape: [], dtype: arr.dtype, values: [plain(got)] }; // 0-d: the value itself
	}
	// C order from the result's strides (an order-F array comes back with F strides).
	const values = [];
	const index = arr.shape.map(() => 0);
	const size = arr.shape.reduce((a, b) => a * b, 1);
	for (let n = 0; n < size; n++) {
		const offset = index.reduce((sum, i, d) => sum + i * got.stride[d], 0);
		values.push(plain(got.data.get ? got.data.get(offset) : got.data[offset]));
		for (let d = index.length - 1; d >= 0; d--) {
			if (++index[d] < arr.shape[d]) break;
			index[d] = 0;
		}
	}
	return { ok: true, shape: arr.shape, dtype: arr.dtype, values };
}

async function main(argv) {
	if (argv[0] === "--codecs") {
		console.log(JSON.stringify([...zarr.registry.keys()]));
		return 0;
	}
	const [dir, format, ...paths] = argv;
	const open = OPENERS[format];
	if (!dir || !open || paths.length === 0) {
		console.error("usage: zarrita_read.mjs ROOT v2|v3|auto PATH...");
		return 2;
	}
	const store = /^https?:\/\//.test(dir) ? new FetchStore(dir) : new FileSystemStore(dir);
	const root = zarr.root(store);
	const results = {};
	for (const path of paths) {
		try {
			results[path] = await read(root, open, path);
		} catch (e) {
			results[path] = { ok: false, error: `${e?.name}: ${e?.message}` };
		}
	}
	const manifest = new URL("node_modules/zarrita/package.json", import.meta.url);
	const version = JSON.parse(readFileSync(manifest, "utf8")).version;
	console.log(JSON.stringify({ zarrita: version, results }));
	return 0;
}

process.exitCode = await main(process.argv.slice(2));
