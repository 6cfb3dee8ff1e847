/* smplab guest kernel: freestanding helpers. memcpy and memset (for the
 * kernel and the CPL3 runtime alike; gcc may also emit calls to them for
 * struct copies) and the number formatting of the kernel's console messages. */

void *memcpy(void *d, const void *s, usize n)
{
    /* One `rep movsb`: a single emulated instruction at CPL0. */
    void *r = d;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return r;
}

void *memset(void *d, int c, usize n)
{
    void *r = d;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return r;
}

static char *kfmt_hex(char *p, u64 v)
{
    *p++ = '0';
    *p++ = 'x';
    int started = 0;
    for (int i = 60; i >= 0; i -= 4) {
        u32 d = (v >> i) & 0xf;
        if (d || started || i == 0) {
            *p++ = "0123456789abcdef"[d];
            started = 1;
        }
    }
    return p;
}

static char *kfmt_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static char *kfmt_dec(char *p, u64 v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = '0' + v % 10;
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}
