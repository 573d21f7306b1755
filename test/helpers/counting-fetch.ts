/** The platform fetch, counting the body bytes handed to the reader (the Hub client's caps are asserted with it). */
export function countingFetch(): { fetch: (input: string, init?: RequestInit) => Promise<Response>; read: () => number } {
  let read = 0;
  return {
    read: () => read,
    fetch: async (input, init) => {
      const response = await fetch(input, init);
      if (response.body === null) return response;
      const counted = response.body.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            read += chunk.length;
            controller.enqueue(chunk);
          },
        }),
      );
      return new Response(counted, { status: response.status, headers: response.headers });
    },
  };
}
