import { fail } from '../errors.js';
import { deepFreeze } from '../freeze.js';
import { arrayOf, boolean, type Check, integer, object, string, validate } from '../validate.js';

/**
 * NCCL communicator buffers: device memory NCCL allocates itself (cuMem / cudaMalloc), outside
 * PyTorch's caching allocator — in nvidia-smi, never in `max_memory_reserved`.
 *
 * Every constant is NVIDIA/nccl's, read at tag v2.27.3-1 (unchanged from v2.21.5-1 unless said):
 * https://github.com/NVIDIA/nccl/blob/v2.27.3-1/src/init.cc (buffer sizes),
 * src/transport/p2p.cc (what one connection allocates), src/transport/nvls.cc (NVLS),
 * src/include/device.h and src/include/comm.h (the constants below). See docs/nccl.md.
 */
export const NCCL_CONSTANTS = deepFreeze({
  /** device.h: `#define NCCL_STEPS 8` (slots of each FIFO). */
  NCCL_STEPS: 8,
  /** init.cc: `DEFAULT_BUFFSIZE (1 << 22)`, the SIMPLE protocol's FIFO (env NCCL_BUFFSIZE). */
  DEFAULT_BUFFSIZE: 4 * 2 ** 20,
  /**
   * init.cc: `DEFAULT_LL_BUFFSIZE (NCCL_LL_LINES_PER_THREAD*NCCL_LL_MAX_NTHREADS*NCCL_STEPS*sizeof(union ncclLLFifoLine))`
   * = 8 × 512 × 8 × 16 (env NCCL_LL_BUFFSIZE).
   */
  DEFAULT_LL_BUFFSIZE: 8 * 512 * 8 * 16,
  /**
   * init.cc: `DEFAULT_LL128_BUFFSIZE (NCCL_LL128_ELEMS_PER_THREAD*NCCL_LL128_MAX_NTHREADS*NCCL_STEPS*sizeof(uint64_t))`
   * = 120 × 640 × 8 × 8 (env NCCL_LL128_BUFFSIZE).
   */
  DEFAULT_LL128_BUFFSIZE: 120 * 640 * 8 * 8,
  /** comm.h: `#define CUDA_IPC_MIN 2097152UL`, the alignment of each P2P connection buffer. */
  CUDA_IPC_MIN: 2 * 2 ** 20,
  /** comm.h: `struct ncclSendMem` / `ncclRecvMem` are each a union padded to `MEM_ALIGN 4096`. */
  MEM_ALIGN: 4096,
  /** device.h: `#define MAXCHANNELS 64` (32 in v2.21.5): the most channels a communicator has. */
  MAXCHANNELS: 64,
  /** device.h: `#define NCCL_MAX_TREE_ARITY 3` (children of a tree node). */
  NCCL_MAX_TREE_ARITY: 3,
  /** device.h: `#define NCCL_MAX_NVLS_ARITY 32` (the most NVLS heads). */
  NCCL_MAX_NVLS_ARITY: 32,
  /** nvls.cc: `NCCL_PARAM(NvlsChunkSize, "NVLS_CHUNKSIZE", 128*1024)`. */
  NVLS_CHUNKSIZE: 128 * 1024,
  /** nvls.cc: `#define NVLS_NCHANNELS_SM90 16` (v2.21.5: `NCCL_PARAM(NvlsChannels, "NVLS_NCHANNELS", 16)`). */
  NVLS_NCHANNELS_SM90: 16,
});

/** One NCCL line, the shape of runtime.ts's RuntimeLine (declared here: runtime.ts imports this file). */
export interface NcclLine {
  readonly label: string;
  readonly bytes: number;
  /** The NCCL constant, file and tag the figure comes from. */
  readonly source: string;
}

type RuntimeLine = NcclLine;

const C = NCCL_CONSTANTS;
const TAG = 'NCCL v2.27.3';

/** What NVLS (NVLink SHARP, Hopper+ with NVSwitch) buffers to count for one communicator. */
export interface NcclNvlsOptions {
  /** NVLS channels (NCCL_NVLS_NCHANNELS). Default NVLS_NCHANNELS_SM90 = 16; Blackwell uses 24 or 32. */
  readonly channels?: number;
  /** NVLS heads: default the ranks per node (NCCL forces one head per GPU within a node). */
  readonly heads?: number;
  /** NCCL_NVLS_CHUNKSIZE in bytes (default 131072). */
  readonly chunkSize?: number;
}

/** One NCCL communicator: PyTorch makes one per process group and device. */
export interface NcclGroup {
  /** A name for the lines ('dp', 'tp', 'pp', 'cp', …). */
  readonly name: string;
  /** Ranks in the communicator. */
  readonly ranks: number;
  /** Nodes it spans (default 1). */
  readonly nodes?: number;
  /**
   * Ring/tree channels: NCCL decides them at init from the topology (NCCL_DEBUG=INFO prints
   * "N coll channels"); bounded by NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS (default 0 / MAXCHANNELS).
   * Overrides the top-level `channels`; one of the two is required.
   */
  readonly channels?: number;
  /** Count the tree's connections beside the ring's (an upper bound: they share the ring's where a tree peer is a ring neighbour). */
  readonly tree?: boolean;
  /** Send/recv (all-to-all, pipeline) peers: their connections are separate from the ring's. */
  readonly p2p?: {
    /** Peers this rank sends to and receives from. */
    readonly peers: number;
    /** Channels per peer (NCCL_DEBUG=INFO: "p2p channels per peer"); runtime-decided. */
    readonly channelsPerPeer: number;
  };
  /** NVLS buffers: true for the defaults, or the figures (overrides the top-level `nvls`). */
  readonly nvls?: boolean | NcclNvlsOptions;
}

/** The NCCL communicators of one rank and the buffer sizes they use. */
export interface NcclOptions {
  readonly groups: readonly NcclGroup[];
  /** Channels for every group that does not give its own. */
  readonly channels?: number;
  /** NCCL_BUFFSIZE (SIMPLE protocol FIFO) in bytes; default 4 MiB. */
  readonly buffSize?: number;
  /** NCCL_LL_BUFFSIZE in bytes; default DEFAULT_LL_BUFFSIZE (524,288). */
  readonly llBuffSize?: number;
  /** NCCL_LL128_BUFFSIZE in bytes; default DEFAULT_LL128_BUFFSIZE (4,915,200). */
  readonly ll128BuffSize?: number;
  /**
   * P2P read: NCCL turns it on for NVLink between two sm80 (A100) GPUs only; then the SIMPLE FIFO
   * sits on the sender. Same total at the defaults (6 + 6 MiB instead of 2 + 10 MiB). Default false.
   */
  readonly p2pRead?: boolean;
  /** NVLS for every group that does not say (NCCL_NVLS_ENABLE; NCCL enables it when the GPUs support multicast). */
  readonly nvls?: boolean | NcclNvlsOptions;
}

const INT_MAX = 2 ** 31 - 1; // NCCL keeps buffSizes[] as int
const nvlsOptions = object({
  fields: { channels: integer(1, C.MAXCHANNELS), heads: integer(1, C.NCCL_MAX_NVLS_ARITY), chunkSize: integer(1, INT_MAX) },
});
const nvlsCheck: Check = (value, path, issues) => (typeof value === 'boolean' ? boolean(value, path, issues) : nvlsOptions(value, path, issues));
const groupCheck = object({
  fields: {
    name: string,
    ranks: integer(1, 2 ** 24),
    nodes: integer(1, 2 ** 24),
    channels: integer(1, C.MAXCHANNELS),
    tree: boolean,
    p2p: object({ fields: { peers: integer(0, 2 ** 24), channelsPerPeer: integer(1, C.MAXCHANNELS) }, required: ['peers', 'channelsPerPeer'] }),
    nvls: nvlsCheck,
  },
  required: ['name', 'ranks'],
});

/** NcclOptions, key by key (runtimeLines checks them as its `nccl`). */
export const ncclOptions: Check = (value, path, issues) => {
  const before = issues.length;
  object({
    fields: {
      groups: arrayOf(groupCheck, { min: 1, max: 1024 }),
      channels: integer(1, C.MAXCHANNELS),
      buffSize: integer(1, INT_MAX),
      llBuffSize: integer(1, INT_MAX),
      ll128BuffSize: integer(1, INT_MAX),
      p2pRead: boolean,
      nvls: nvlsCheck,
    },
    required: ['groups'],
  })(value, path, issues);
  if (issues.length > before) return;
  const options = value as NcclOptions;
  options.groups.forEach((group, i) => {
    const at = [...path, 'groups', i];
    if (group.channels === undefined && options.channels === undefined)
      issues.push({
        path: [...at, 'channels'],
        code: 'missing-option',
        message: 'is required (here or at the top level): NCCL picks the channel count at run time from the topology; NCCL_DEBUG=INFO prints "N coll channels"',
        expected: `an integer 1 – ${C.MAXCHANNELS}`,
        received: 'missing',
      });
    const nodes = group.nodes ?? 1;
    if (nodes > group.ranks)
      issues.push({ path: [...at, 'nodes'], code: 'bad-option', message: 'must be at most ranks', expected: `1 – ${group.ranks}`, received: String(nodes) });
    if (group.p2p !== undefined && group.p2p.peers > group.ranks - 1)
      issues.push({
        path: [...at, 'p2p', 'peers'],
        code: 'bad-option',
        message: 'must be at most ranks − 1',
        expected: `0 – ${group.ranks - 1}`,
        received: String(group.p2p.peers),
      });
  });
};

function align(bytes: number, to: number): number {
  return Math.ceil(bytes / to) * to;
}

/**
 * Device bytes one P2P connection (one send and one receive, one channel) costs this rank, from
 * src/transport/p2p.cc: the sender allocates ALIGN(sizeof(ncclSendMem) [+ SIMPLE with P2P read],
 * CUDA_IPC_MIN), the receiver ALIGN(sizeof(ncclRecvMem) + LL + LL128 [+ SIMPLE without], CUDA_IPC_MIN).
 * At the defaults: 2 MiB + 10 MiB = 12 MiB.
 *
 * @example
 * ```ts
 * import { ncclConnectionBytes } from 'vram-ts';
 * console.log(ncclConnectionBytes({}).recv, ncclConnectionBytes({}).send); // 10485760 2097152
 * ```
 */
export function ncclConnectionBytes(options: Pick<NcclOptions, 'buffSize' | 'llBuffSize' | 'll128BuffSize' | 'p2pRead'>): {
  readonly send: number;
  readonly recv: number;
} {
  validate(
    options,
    object({ fields: { buffSize: integer(1, INT_MAX), llBuffSize: integer(1, INT_MAX), ll128BuffSize: integer(1, INT_MAX), p2pRead: boolean } }),
    ['ncclConnectionBytes', 'options'],
  );
  const simple = options.buffSize ?? C.DEFAULT_BUFFSIZE;
  const ll = options.llBuffSize ?? C.DEFAULT_LL_BUFFSIZE;
  const ll128 = options.ll128BuffSize ?? C.DEFAULT_LL128_BUFFSIZE;
  const read = options.p2pRead === true;
  return {
    send: align(C.MEM_ALIGN + (read ? simple : 0), C.CUDA_IPC_MIN),
    recv: align(C.MEM_ALIGN + ll + ll128 + (read ? 0 : simple), C.CUDA_IPC_MIN),
  };
}

function line(label: string, bytes: number, source: string, path: readonly (string | number)[]): RuntimeLine {
  if (!Number.isSafeInteger(bytes)) fail('overflow', `${label} is past 2^53 bytes`, { path, received: String(bytes) });
  return { label, bytes, source };
}

/** ncclLines without the check (runtimeLines has checked its `nccl` already). */
export function ncclLinesUnchecked(options: NcclOptions, path: readonly (string | number)[]): RuntimeLine[] {
  const { send, recv } = ncclConnectionBytes({
    ...(options.buffSize !== undefined ? { buffSize: options.buffSize } : {}),
    ...(options.llBuffSize !== undefined ? { llBuffSize: options.llBuffSize } : {}),
    ...(options.ll128BuffSize !== undefined ? { ll128BuffSize: options.ll128BuffSize } : {}),
    ...(options.p2pRead !== undefined ? { p2pRead: options.p2pRead } : {}),
  });
  const pair = send + recv;
  const sizes = `ALIGN(ncclRecvMem + LL + LL128${options.p2pRead === true ? '' : ' + SIMPLE'}, CUDA_IPC_MIN) + ALIGN(ncclSendMem${options.p2pRead === true ? ' + SIMPLE' : ''}, CUDA_IPC_MIN) = ${pair} B per connection`;
  const lines: RuntimeLine[] = [];
  options.groups.forEach((group, i) => {
    const at = [...path, 'groups', i];
    const nodes = group.nodes ?? 1;
    const channels = (group.channels ?? options.channels)!;
    if (group.ranks >= 2) {
      // Off-node ring neighbours use the NET transport, whose LL FIFO (and all FIFOs without
      // GPUDirect RDMA) sit in host memory: the P2P size is then an upper bound.
      const bound = nodes > 1 ? ', up to' : '';
      lines.push(
        line(
          `NCCL ${group.name}: ring buffers (${channels} channels${bound})`,
          channels * pair,
          `${TAG} src/transport/p2p.cc: 1 send + 1 recv per channel, ${sizes}`,
          [...at, 'channels'],
        ),
      );
    }
    if (group.tree === true && group.ranks > 2) {
      const peers = nodes === 1 ? Math.min(group.ranks - 1, 2) : Math.min(group.ranks - 1, 1 + C.NCCL_MAX_TREE_ARITY);
      lines.push(
        line(
          `NCCL ${group.name}: tree buffers (${channels} channels × ${peers} peers, up to)`,
          channels * peers * pair,
          `${TAG} src/graph/connect.cc: parent + ${nodes === 1 ? 'one child (intra-node chain)' : 'NCCL_MAX_TREE_ARITY children'}, send + recv each; shared with the ring's where the peer is a ring neighbour`,
          [...at, 'tree'],
        ),
      );
    }
    if (group.p2p !== undefined && group.p2p.peers > 0) {
      const { peers, channelsPerPeer } = group.p2p;
      lines.push(
        line(
          `NCCL ${group.name}: send/recv buffers (${peers} peers × ${channelsPerPeer} channels)`,
          peers * channelsPerPeer * pair,
          `${TAG} src/transport/p2p.cc (connIndex 1, apart from the ring's): ${sizes}`,
          [...at, 'p2p'],
        ),
      );
    }
    const nvls = group.nvls ?? options.nvls;
    const perNode = Math.ceil(group.ranks / nodes);
    // nvls.cc ncclNvlsInit: no NVLS with 2 GPUs or fewer.
    if (nvls !== undefined && nvls !== false && perNode > 2) {
      const given = nvls === true ? {} : nvls;
      const nvlsChannels = given.channels ?? C.NVLS_NCHANNELS_SM90;
      const heads = given.heads ?? perNode;
      const chunk = given.chunkSize ?? C.NVLS_CHUNKSIZE;
      lines.push(
        line(
          `NCCL ${group.name}: NVLS buffers (${nvlsChannels} channels × ${heads} heads, at least)`,
          nvlsChannels * 2 * chunk * C.NCCL_STEPS * heads,
          `${TAG} src/transport/nvls.cc ncclNvlsBufferSetup: nChannels × 2 × NVLS_CHUNKSIZE × NCCL_STEPS × nHeads, before multicast granularity (v2.21.5 adds 2 × NVLS_MEM_ALIGN_SIZE per channel and head)`,
          [...at, 'nvls'],
        ),
      );
    }
  });
  return lines;
}

/**
 * NCCL's device buffers per communicator on one rank, one line each for the ring, the tree (when
 * asked), send/recv peers and NVLS, every `source` naming the NCCL constant and tag. The channel
 * counts are NCCL's run-time choice from the topology: they are inputs (no default), as are
 * the send/recv peers. Not counted: NCCL's small device structures, the proxy's host memory,
 * CollNet, and buffers registered by the user. Options are checked key by key: a VramError with
 * the path otherwise.
 *
 * @example
 * ```ts
 * import { ncclLines } from 'vram-ts';
 * const [ring] = ncclLines({ groups: [{ name: 'dp', ranks: 8 }], channels: 16 });
 * console.log(ring?.label, ring?.bytes); // NCCL dp: ring buffers (16 channels) 201326592
 * ```
 */
export function ncclLines(options: NcclOptions): RuntimeLine[] {
  validate(options, ncclOptions, ['ncclLines', 'options']);
  return ncclLinesUnchecked(options, ['ncclLines', 'options']);
}
