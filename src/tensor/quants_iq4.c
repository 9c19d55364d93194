/* quants_iq4.c -- the 16 values an IQ4 nibble stands for, shared by IQ4_NL
 * and IQ4_XS: ggml's kvalues_iq4nl, a non-uniform grid denser near zero,
 * where most weights lie, sorted so a quantizer can search it. */
#include "tensor_internal.h"

const int8_t tensor_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};
