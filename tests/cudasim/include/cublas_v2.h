/* cudasim stand-in (see cudasim.h). */
#include "cudasim.h"
