use std::time::Instant;
#[cfg(target_arch = "x86_64")]
// Safety: `dst` and `src` have equal lengths; SSE2 is part of x86-64.
unsafe fn nt_copy(dst: &mut [u8], src: &[u8]) {
    use std::arch::x86_64::*;
    let n = dst.len();
    let head = (16 - (dst.as_ptr() as usize & 15)) & 15;
    let head = head.min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let body = (n - head) / 64 * 64;
    let (d, s) = (dst.as_mut_ptr().add(head), src.as_ptr().add(head));
    let mut i = 0;
    while i < body {
        let a = _mm_loadu_si128(s.add(i) as *const __m128i);
        let b = _mm_loadu_si128(s.add(i + 16) as *const __m128i);
        let c = _mm_loadu_si128(s.add(i + 32) as *const __m128i);
        let e = _mm_loadu_si128(s.add(i + 48) as *const __m128i);
        _mm_stream_si128(d.add(i) as *mut __m128i, a);
        _mm_stream_si128(d.add(i + 16) as *mut __m128i, b);
        _mm_stream_si128(d.add(i + 32) as *mut __m128i, c);
        _mm_stream_si128(d.add(i + 48) as *mut __m128i, e);
        i += 64;
    }
    _mm_sfence();
    dst[head + body..].copy_from_slice(&src[head + body..]);
}
fn main() {
    const N: usize = 256 << 20;
    let src = vec![3u8; N];
    let mut dst = vec![1u8; N];
    let chunk = 2 << 20;
    for threads in [1usize, 2, 4, 8, 12, 16] {
        for nt in [false, true] {
            let mut best = f64::MAX;
            let mut all = vec![];
            for _ in 0..7 {
                let t = Instant::now();
                std::thread::scope(|s| {
                    let mut parts: Vec<Vec<(&mut [u8], &[u8])>> = (0..threads).map(|_| vec![]).collect();
                    for (i, (d, sr)) in dst.chunks_mut(chunk).zip(src.chunks(chunk)).enumerate() {
                        parts[i % threads].push((d, sr));
                    }
                    for p in parts {
                        // SAFETY: `d` and `sr` are chunks of equal length (same `chunk`, equal buffers).
                        s.spawn(move || for (d, sr) in p { if nt { unsafe { nt_copy(d, sr) } } else { d.copy_from_slice(sr) } });
                    }
                });
                let e = t.elapsed().as_secs_f64();
                all.push(e);
                best = best.min(e);
            }
            all.sort_by(f64::total_cmp);
            println!("threads {threads:2} nt {nt:5}: median {:.1} GiB/s best {:.1} GiB/s", N as f64 / all[3] / (1u64<<30) as f64, N as f64 / best / (1u64<<30) as f64);
        }
    }
}
