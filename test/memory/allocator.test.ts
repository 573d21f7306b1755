/**
 * The caching allocator replay (issue 24, item 2), case by case from the rules of
 * c10/cuda/CUDACachingAllocator.cpp and CUDAAllocatorConfig.cpp: every figure below is worked by
 * hand from the source's constants (kMinBlockSize 512 B, kSmallSize 1 MiB, kSmallBuffer 2 MiB,
 * kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB).
 */
import { describe, expect, it } from 'vitest';
import { VramError } from '../../src/errors.js';
import { parseAllocConf } from '../../src/memory/alloc-conf.js';
import { formatSize, replayAllocator, roundSize } from '../../src/memory/allocator.js';

const MiB = 2 ** 20;

function issues(f: () => unknown): string[] {
  try {
    f();
  } catch (error) {
    if (error instanceof VramError) return error.issues.map((i) => `${i.path.join('.')}:${i.code}`);
    throw error;
  }
  return [];
}

describe('round_size, get_pool, get_allocation_size', () => {
  it('rounds to 512 B and packs small requests (<= 1 MiB) in 2 MiB segments', () => {
    expect([roundSize(0), roundSize(1), roundSize(512), roundSize(513)]).toEqual([512, 512, 512, 1024]);
    // 512 B + 1 MiB fit one 2 MiB segment (the rest, 1 MiB − 512, is split off: >= 512 B);
    // a second 1 MiB does not fit what is left, so a second segment.
    const r = replayAllocator([
      [0, 100],
      [1, MiB],
      [2, MiB],
    ]);
    expect(r.maxReserved).toBe(4 * MiB);
    expect(r.maxAllocated).toBe(512 + 2 * MiB);
    expect(r.segments).toBe(2);
  });

  it('1–10 MiB requests cut a 20 MiB segment; from 10 MiB a segment of the size rounded to 2 MiB', () => {
    expect(replayAllocator([[0, MiB + 1]]).maxReserved).toBe(20 * MiB);
    expect(replayAllocator([[0, 10 * MiB - 512]]).maxReserved).toBe(20 * MiB);
    // 10 MiB − 1 rounds to 10 MiB first (512 B), which is not below kMinLargeAlloc.
    expect(replayAllocator([[0, 10 * MiB - 1]]).maxReserved).toBe(10 * MiB);
    expect(replayAllocator([[0, 10 * MiB]]).maxReserved).toBe(10 * MiB);
    expect(replayAllocator([[0, 10 * MiB + 1]]).maxReserved).toBe(12 * MiB);
  });

  it('the large pool splits only when more than 1 MiB is left', () => {
    // 19 MiB → a 20 MiB segment; 1 MiB left is not > kSmallSize: the whole block is allocated.
    expect(replayAllocator([[0, 19 * MiB]]).maxAllocated).toBe(20 * MiB);
    // 19 MiB − 512: 1 MiB + 512 left → split.
    expect(replayAllocator([[0, 19 * MiB - 512]]).maxAllocated).toBe(19 * MiB - 512);
  });

  it('freed neighbours merge: two freed 5 MiB blocks serve a 10 MiB request in the same segment', () => {
    const log = [[0, 5 * MiB], [1, 5 * MiB], [2, 5 * MiB], [3, 5 * MiB], [-2], [-3], [4, 10 * MiB]];
    const r = replayAllocator(log);
    expect(r.maxReserved).toBe(20 * MiB);
    expect(r.segments).toBe(1);
    expect(r.allocated).toBe(20 * MiB);
  });

  it('reports reserved and fragmentation at the peak and the largest free block then', () => {
    // 3 MiB in a 20 MiB segment: 17 MiB cached beside it at the peak, plus a 2 MiB small segment after.
    const r = replayAllocator([[0, 3 * MiB], [-1], [1, MiB]]);
    expect(r.maxAllocated).toBe(3 * MiB);
    expect(r.reservedAtPeak).toBe(20 * MiB);
    expect(r.fragmentationAtPeak).toBe(17 * MiB);
    expect(r.largestFreeAtPeak).toBe(17 * MiB);
    expect(r.peakEntry).toBe(0);
    expect(r.maxReserved).toBe(22 * MiB);
  });
});

describe('roundup_power2_divisions', () => {
  it('the docs example: 1200 with 4 divisions lies in 1024–2048 (1024, 1280, 1536, 1792) and rounds to 1280', () => {
    // docs/source/notes/cuda.rst: "if we need to round-up size of 1200 and if number of divisions is 4,
    // the size 1200 lies between 1024 and 2048 and if we do 4 divisions between them, the values are
    // 1024, 1280, 1536, and 1792. So, allocation size of 1200 will be rounded to 1280".
    const four = parseAllocConf('roundup_power2_divisions:4');
    expect(roundSize(1200 * MiB, four)).toBe(1280 * MiB);
    // In bytes round_size applies the divisions only above kMinBlockSize × divisions (2048 B): 1200 B → 1536.
    expect(roundSize(1200, four)).toBe(1536);
    expect(roundSize(2049, four)).toBe(2560);
    expect(roundSize(2048 * MiB, four)).toBe(2048 * MiB);
  });

  it('the list form as the source parses it: the first entry fills below it, > overwrites from the last entry on', () => {
    const conf = parseAllocConf('roundup_power2_divisions:[256:1,512:2,1024:4,>:8]');
    expect(conf.roundupPower2Divisions).toEqual([1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 8, 8, 8, 8]);
    // 600 MiB is in 512 MiB – 1 GiB (2 divisions: 512, 768) → 768 MiB; 1.2 GiB gets 8 divisions of 1 GiB.
    expect(roundSize(600 * MiB, conf)).toBe(768 * MiB);
    expect(roundSize(1200 * MiB, conf)).toBe(1280 * MiB);
    expect(roundSize(300 * MiB + 1, conf)).toBe(300 * MiB + 512);
    const replay = replayAllocator([[0, 600 * MiB]], { conf: 'roundup_power2_divisions:[256:1,512:2,1024:4,>:8]' });
    expect(replay.maxReserved).toBe(768 * MiB);
  });
});

describe('max_split_size_mb', () => {
  const conf = 'max_split_size_mb:64';
  it('a request below it never takes an oversize cached block', () => {
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 30 * MiB]], { conf }).maxReserved).toBe(130 * MiB);
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 30 * MiB]]).maxReserved).toBe(100 * MiB);
  });
  it('a request at or above it takes an oversize block only within max_non_split_rounding (20 MiB)', () => {
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 90 * MiB]], { conf }).maxReserved).toBe(100 * MiB);
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 70 * MiB]], { conf }).maxReserved).toBe(170 * MiB);
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 70 * MiB]], { conf: `${conf},max_non_split_rounding_mb:40` }).maxReserved).toBe(100 * MiB);
  });
  it('oversize blocks are not split', () => {
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 90 * MiB]], { conf }).maxAllocated).toBe(100 * MiB);
  });
  it('before failing, frees just enough oversize cached segments (release_available_cached_blocks)', () => {
    const log = [[0, 40 * MiB], [1, 40 * MiB], [-1], [-2], [2, 30 * MiB]];
    const r = replayAllocator(log, { conf: 'max_split_size_mb:32', capacity: 100 * MiB });
    expect(r.reserved).toBe(70 * MiB); // one 40 MiB segment freed, not both
    expect(r.deviceFrees).toBe(1);
    expect(r.allocRetries).toBe(0);
    expect(r.oom).toBeUndefined();
  });
});

describe('the OOM condition', () => {
  it('frees every cached whole segment and retries before failing (release_cached_blocks)', () => {
    const r = replayAllocator([[0, 60 * MiB], [-1], [1, 70 * MiB]], { capacity: 100 * MiB });
    expect(r.oom).toBeUndefined();
    expect(r.allocRetries).toBe(1);
    expect(r.deviceFrees).toBe(1);
    expect(r.reserved).toBe(70 * MiB);
    expect(r.maxReserved).toBe(70 * MiB);
  });

  it('fails when even then the device has no room, with PyTorch’s message', () => {
    const r = replayAllocator(
      [
        [0, 60 * MiB],
        [1, 50 * MiB],
      ],
      { capacity: 100 * MiB },
    );
    expect(r.oom).toEqual({
      entry: 1,
      requested: 50 * MiB,
      allocationSize: 50 * MiB,
      allocated: 60 * MiB,
      reserved: 60 * MiB,
      capacity: 100 * MiB,
      message:
        'CUDA out of memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which 40.00 MiB is free. Of the allocated memory 60.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)',
    });
  });

  it('a split segment cannot be released: its free part shows as reserved but unallocated', () => {
    const r = replayAllocator([[0, 5 * MiB], [1, 5 * MiB], [-1], [2, 90 * MiB]], { capacity: 100 * MiB, deviceTotal: 110 * MiB });
    expect(r.oom?.entry).toBe(3);
    expect(r.oom?.message).toContain('Tried to allocate 90.00 MiB. GPU 0 has a total capacity of 110.00 MiB of which 80.00 MiB is free.');
    expect(r.oom?.message).toContain('Of the allocated memory 5.00 MiB is allocated by PyTorch, and 15.00 MiB is reserved by PyTorch but unallocated.');
  });

  it('"Tried to allocate" is the allocation size (a 3 MiB request asks for a 20 MiB segment); the fraction shows as allowed', () => {
    const r = replayAllocator([[0, 3 * MiB]], { capacity: 100 * MiB, memoryFraction: 0.1 });
    expect(r.oom?.message).toContain(
      'Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 100.00 MiB of which 100.00 MiB is free. 10.00 MiB allowed; Of the allocated',
    );
  });
});

describe('garbage_collection_threshold', () => {
  const MB200 = { capacity: 200 * MiB, memoryFraction: 1, conf: 'garbage_collection_threshold:0.5' };
  it('frees cached whole segments when reserved passes threshold × allowed, before cudaMalloc', () => {
    const log = [[0, 30 * MiB], [1, 30 * MiB], [-1], [2, 40 * MiB]];
    // 60 MiB reserved > 0.5 × 100 MiB: the cached 30 MiB segment goes first.
    expect(replayAllocator(log, { ...MB200, capacity: 100 * MiB }).maxReserved).toBe(70 * MiB);
    // Without a memory fraction the threshold does nothing (the source gates it on set_fraction).
    expect(replayAllocator(log, { capacity: 100 * MiB, conf: 'garbage_collection_threshold:0.5' }).maxReserved).toBe(100 * MiB);
  });
  it('frees the blocks at least as old as the average first (age: get_free_block calls on the pool)', () => {
    // A (30 MiB) cached at call 2, B (40 MiB) at call 3; at call 4 ages 2 and 1, average 1.5: A goes,
    // 30 MiB reclaimed >= the 20 MiB over the threshold, so B stays.
    const log = [[0, 30 * MiB], [1, 40 * MiB], [-1], [2, 50 * MiB], [-2], [3, 60 * MiB]];
    const r = replayAllocator(log, MB200);
    expect(r.deviceFrees).toBe(1);
    expect(r.reserved).toBe(150 * MiB);
  });
});

describe('expandable_segments:True', () => {
  const conf = 'expandable_segments:True';
  it('the large pool grows one segment by 20 MiB pages, the small pool by 2 MiB pages', () => {
    // 3 MiB maps one 20 MiB page; 25 MiB uses the 17 MiB left and maps one more page: 40 MiB,
    // where separate segments take 20 + 26 MiB.
    const log = [
      [0, 3 * MiB],
      [1, 25 * MiB],
    ];
    expect(replayAllocator(log, { conf }).maxReserved).toBe(40 * MiB);
    expect(replayAllocator(log).maxReserved).toBe(46 * MiB);
    expect(replayAllocator([[0, 100]], { conf }).maxReserved).toBe(2 * MiB);
    const r = replayAllocator(
      [
        [0, 3 * MiB],
        [1, 25 * MiB],
        [2, 100],
      ],
      { conf },
    );
    expect(r.segments).toBe(2);
  });
  it('splits large blocks down to 512 B and unmaps free pages before failing', () => {
    // 19 MiB: a 20 MiB page, 1 MiB left split off (remaining >= 512 with expandable segments).
    expect(replayAllocator([[0, 19 * MiB]], { conf }).maxAllocated).toBe(19 * MiB);
    // 60 MiB mapped (3 pages), freed; 70 MiB needs 4 pages: 60 + 20 > 70 MiB capacity, so the free
    // pages are unmapped and the 4 pages... still do not fit 70 MiB: OOM.
    const r = replayAllocator([[0, 60 * MiB], [-1], [1, 70 * MiB]], { conf, capacity: 70 * MiB });
    expect(r.oom?.entry).toBe(2);
    expect(r.reserved).toBe(0);
    // With 80 MiB it fits: the 60 MiB free mapped and one more page.
    const fits = replayAllocator([[0, 60 * MiB], [-1], [1, 70 * MiB]], { conf, capacity: 80 * MiB });
    expect(fits.oom).toBeUndefined();
    expect(fits.maxReserved).toBe(80 * MiB);
  });
});

describe('parseAllocConf', () => {
  it('reads the real syntax: spaces ignored, a trailing comma allowed', () => {
    const conf = parseAllocConf(' expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,roundup_power2_divisions:4,');
    expect(conf).toMatchObject({ expandableSegments: true, maxSplitSize: 128 * MiB, garbageCollectionThreshold: 0.6, backend: 'native' });
    expect(conf.roundupPower2Divisions).toEqual(new Array(16).fill(4));
    expect(parseAllocConf('')).toMatchObject({ expandableSegments: false, maxSplitSize: Number.POSITIVE_INFINITY, maxNonSplitRounding: 20 * MiB });
    expect(parseAllocConf('release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False,backend:native')).toMatchObject({ backend: 'native' });
  });
  it('refuses what PyTorch refuses, with a path', () => {
    for (const bad of [
      'expandable_segment:True',
      'expandable_segments:true',
      'max_split_size_mb:20',
      'max_split_size_mb',
      'max_split_size_mb:1.5',
      'garbage_collection_threshold:1.0',
      'garbage_collection_threshold:0',
      'roundup_power2_divisions:3',
      'roundup_power2_divisions:[256:3]',
      'roundup_power2_divisions:[300:2]',
      'roundup_power2_divisions:[256:2',
      'backend:cuda',
      'expandable_segments:True max_split_size_mb:64',
      'expandable_segments:True;max_split_size_mb:64',
    ])
      expect(
        issues(() => parseAllocConf(bad)),
        bad,
      ).toEqual(['parseAllocConf.text:bad-option']);
    expect(() => parseAllocConf('expandable_segment:True')).toThrow(
      /Unrecognized CachingAllocator option: expandable_segment; did you mean "expandable_segments"/,
    );
  });
  it('replayAllocator reads conf as text or as an object; bad options are errors at their path', () => {
    expect(replayAllocator([[0, 100 * MiB], [-1], [1, 30 * MiB]], { conf: { maxSplitSize: 64 * MiB } }).maxReserved).toBe(130 * MiB);
    expect(issues(() => replayAllocator([], { conf: 'max_split:1' }))).toEqual(['replayAllocator.options.conf:bad-option']);
    expect(issues(() => replayAllocator([], { conf: { maxSplit: 1 } as never }))).toEqual(['replayAllocator.options.conf.maxSplit:unknown-option']);
    expect(issues(() => replayAllocator([], { capacity: -1 }))).toEqual(['replayAllocator.options.capacity:bad-option']);
    expect(issues(() => replayAllocator([], { memoryFraction: 0.5 }))).toEqual(['replayAllocator.options.memoryFraction:bad-option']);
    expect(issues(() => replayAllocator([], { cap: 1 } as never))).toEqual(['replayAllocator.options.cap:unknown-option']);
    expect(issues(() => replayAllocator([], { conf: 'backend:cudaMallocAsync' }))).toEqual(['replayAllocator.options.conf:unsupported']);
    expect(issues(() => replayAllocator([], 5 as never))).toEqual(['replayAllocator.options:bad-option']);
  });
});

describe('format_size', () => {
  it('bytes up to 1024, then KiB, MiB, GiB with two decimals, ties to even as printf', () => {
    expect([formatSize(0), formatSize(1024), formatSize(1025), formatSize(MiB), formatSize(MiB + 1)]).toEqual([
      '0 bytes',
      '1024 bytes',
      '1.00 KiB',
      '1024.00 KiB',
      '1.00 MiB',
    ]);
    expect(formatSize(1.125 * MiB)).toBe('1.12 MiB');
    expect(formatSize(1.375 * MiB)).toBe('1.38 MiB');
    expect(formatSize(80 * 2 ** 30)).toBe('80.00 GiB');
  });
});

describe('the log', () => {
  it('takes up to 50 million entries; longer is a VramError before any entry is read', () => {
    expect(issues(() => replayAllocator(new Array(50_000_001)))).toEqual(['replayAllocator.log:bad-argument']);
    expect(replayAllocator(new Array(200_000).fill([-1])).maxReserved).toBe(0);
  });
});
