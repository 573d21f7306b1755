/** Reading a folder of oracle fixtures: every JSON file under test/fixtures/<folder>, sorted by name. */
import { readdirSync, readFileSync } from 'node:fs';

export function loadJsonFixtures<T>(folder: string, name: (file: string) => boolean = (f) => f.endsWith('.json')): T[] {
  const dir = new URL(`../fixtures/${folder}/`, import.meta.url);
  return readdirSync(dir)
    .filter(name)
    .sort()
    .map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')) as T);
}
